package target

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/converge-run/converge"
)

// DefaultHTTPTimeout is the timeout of an HTTP call when HTTPConfig.Timeout
// is zero.
const DefaultHTTPTimeout = 30 * time.Second

const (
	// maxExcerptBytes bounds the excerpt of a failed response's body kept in
	// the error message.
	maxExcerptBytes = 512
	// maxDrainBytes bounds how much of an unread response body is drained so
	// that the connection can be reused; a larger body costs the connection.
	maxDrainBytes = 256 << 10
)

// HTTPConfig configures an HTTP target.
type HTTPConfig struct {
	// URL is the http or https endpoint the request is POSTed to.
	URL string
	// Timeout bounds one call, response body included. Zero means
	// DefaultHTTPTimeout.
	Timeout time.Duration
	// Headers are extra request headers, such as Authorization. Their values
	// never appear in errors. A "Host" entry sets the request's host. They
	// cannot replace Content-Type, Idempotency-Key, Converge-Attempt,
	// Content-Length or Transfer-Encoding.
	Headers map[string]string
	// TransientStatuses and PermanentStatuses override the class of a
	// response status; see Classify.
	TransientStatuses []int
	PermanentStatuses []int
	// Signer, when set, signs every call with the Standard Webhooks scheme
	// (SPEC §12): webhook-id is the run id, the same on every attempt.
	Signer *Signer
	// Client is the client used for calls. When nil, a client sharing one
	// pooled transport among all HTTP targets is used; it does not follow
	// redirects, so a 3xx answer is a permanent failure rather than a
	// re-sent request with credentials to another place.
	Client *http.Client
}

// HTTP is a target that POSTs each attempt as JSON to a URL.
type HTTP struct {
	url       *url.URL
	urlString string // url.String(), made once
	shown     string // the URL as shown in errors: no user info, no query
	timeout   time.Duration
	header    http.Header
	host      string
	transient []int
	permanent []int
	client    *http.Client
	signer    *Signer
	// spanStart are the start options of a call's span: kind client and
	// the request's attributes (callSpanAttrs), made once per target.
	spanStart []trace.SpanStartOption
	// secrets are the configured credentials (header values, the URL's
	// password and query values), removed from whatever the target answers
	// before it is kept: a target that repeats its credentials in an error
	// must not put them in dead letters, logs and the API.
	secrets *strings.Replacer
}

// sharedClient is the client of HTTP targets without their own: one
// transport whose pool lets 100 and more concurrent workers keep their
// connections to the same host alive between calls.
var sharedClient = sync.OnceValue(func() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 1024
	t.MaxIdleConnsPerHost = 256
	t.IdleConnTimeout = 90 * time.Second
	return &http.Client{
		Transport: t,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
})

// callSpanAttrs are the HTTP semantic conventions' request attributes of
// every call to u (shown: u without user info and query), computed once
// per target rather than per call. url.full never holds the query or user
// info, where a credential may be.
func callSpanAttrs(u *url.URL, shown string) []attribute.KeyValue {
	port := 80
	if u.Scheme == "https" {
		port = 443
	}
	if p, err := strconv.Atoi(u.Port()); err == nil {
		port = p
	}
	return []attribute.KeyValue{semconv.HTTPRequestMethodPost, semconv.ServerAddress(u.Hostname()), semconv.ServerPort(port), semconv.URLFull(shown)}
}

// httpSpanName is the name of an HTTP call's span, as "converge.exec" is
// an exec call's.
const httpSpanName = "converge.http"

// The call's span (SPEC §14): with a span in the call's context (the
// attempt's, converge.attempt), the call runs in a client span of its own,
// converge.http, a child of it, with the HTTP semantic conventions'
// attributes, and sends that span's W3C traceparent (and tracestate), so
// that the target's side of the call is a child of the call. With no
// valid span in the context (tracing off) no span is made and nothing is
// sent, at the cost of one context look-up; for an attempt not sampled the
// call's span does not record, but its traceparent, flagged so, is sent.

// startCallSpan starts the call's span, a child of the span of ctx, and
// puts its trace context on h; it returns nil when ctx has no valid span.
func (t *HTTP) startCallSpan(ctx context.Context, h http.Header) trace.Span {
	parent := trace.SpanFromContext(ctx)
	if !parent.SpanContext().IsValid() {
		return nil
	}
	ctx, span := parent.TracerProvider().Tracer(tracerName).Start(ctx, httpSpanName, t.spanStart...)
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(h))
	return span
}

// setCallStatus records on the call's span (nil: none) the response's
// status (0: none) or the error of a call that got no response: a status
// of 400 and above, and an error, are the span's error status.
func setCallStatus(span trace.Span, status int, err error) {
	if span == nil || !span.IsRecording() {
		return
	}
	switch {
	case status >= 400:
		span.SetAttributes(semconv.HTTPResponseStatusCode(status), semconv.ErrorTypeKey.String(strconv.Itoa(status)))
		span.SetStatus(codes.Error, statusText(status))
	case status != 0:
		span.SetAttributes(semconv.HTTPResponseStatusCode(status))
	case err != nil:
		span.SetAttributes(errorTypeOf(err))
		span.SetStatus(codes.Error, err.Error())
	}
}

// errorTypeOf is the error.type of a call that got no response.
func errorTypeOf(err error) attribute.KeyValue {
	if errors.Is(err, ErrTimeout) {
		return semconv.ErrorTypeKey.String("timeout")
	}
	return semconv.ErrorTypeOther
}

// reservedHeaders are set by the target itself.
var reservedHeaders = []string{"Content-Type", "Idempotency-Key", "Converge-Attempt", "Content-Length", "Transfer-Encoding"}

// NewHTTP returns an HTTP target, or an error naming the invalid setting.
func NewHTTP(cfg HTTPConfig) (*HTTP, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("http target: invalid url: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, errors.New("http target: url must be an absolute http or https URL")
	}
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("http target: timeout must not be negative, got %s", cfg.Timeout)
	}
	t := &HTTP{
		url:       u,
		shown:     (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path, RawPath: u.RawPath}).String(),
		timeout:   cfg.Timeout,
		header:    make(http.Header, len(cfg.Headers)+1),
		transient: slices.Clone(cfg.TransientStatuses),
		permanent: slices.Clone(cfg.PermanentStatuses),
		client:    cfg.Client,
		signer:    cfg.Signer,
	}
	t.urlString = u.String()
	if t.timeout == 0 {
		t.timeout = DefaultHTTPTimeout
	}
	if t.client == nil {
		t.client = sharedClient()
	}
	t.spanStart = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(callSpanAttrs(u, t.shown)...)}
	for _, s := range t.transient {
		if s < 100 || s > 599 {
			return nil, fmt.Errorf("http target: transient_statuses: %d is not an HTTP status", s)
		}
		if slices.Contains(t.permanent, s) {
			return nil, fmt.Errorf("http target: status %d is both in transient_statuses and permanent_statuses", s)
		}
	}
	for _, s := range t.permanent {
		if s < 100 || s > 599 {
			return nil, fmt.Errorf("http target: permanent_statuses: %d is not an HTTP status", s)
		}
	}
	t.header.Set("User-Agent", "converge")
	for name, value := range cfg.Headers {
		if !validHeaderName(name) {
			return nil, fmt.Errorf("http target: invalid header name %q", name)
		}
		if strings.ContainsAny(value, "\r\n\x00") {
			// The value is deliberately left out: it may be a secret.
			return nil, fmt.Errorf("http target: header %q has an invalid value", name)
		}
		key := textproto.CanonicalMIMEHeaderKey(name)
		if slices.Contains(reservedHeaders, key) || t.signer != nil && slices.Contains(signingHeaders, key) {
			return nil, fmt.Errorf("http target: header %q is set by converge", name)
		}
		if key == "Host" {
			t.host = value
			continue
		}
		t.header.Set(key, value)
	}
	t.secrets = secretReplacer(u, cfg.Headers)
	return t, nil
}

// minSecretLen is the length under which a configured value is not taken
// for a credential (and not redacted: "1", "json").
const minSecretLen = 6

// secretReplacer returns a replacer of every credential-like value of the
// URL and the headers by "***", longest first.
func secretReplacer(u *url.URL, headers map[string]string) *strings.Replacer {
	var secrets []string
	add := func(v string) {
		if len(v) < minSecretLen {
			return
		}
		secrets = append(secrets, v)
		// As it appears inside a JSON string too (escaped <, >, &, ").
		if b, err := json.Marshal(v); err == nil && string(b[1:len(b)-1]) != v {
			secrets = append(secrets, string(b[1:len(b)-1]))
		}
	}
	if p, ok := u.User.Password(); ok {
		add(p)
		add(url.QueryEscape(p))
	}
	for _, vs := range u.Query() {
		for _, v := range vs {
			add(v)
			add(url.QueryEscape(v))
		}
	}
	for name, v := range headers {
		if textproto.CanonicalMIMEHeaderKey(name) == "Host" {
			continue
		}
		add(v)
		// "Bearer <token>", "Basic <base64>": the credential alone too.
		if _, cred, ok := strings.Cut(strings.TrimSpace(v), " "); ok {
			add(strings.TrimSpace(cred))
		}
	}
	slices.SortFunc(secrets, func(a, b string) int {
		if d := len(b) - len(a); d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	if len(secrets) == 0 {
		return nil // nothing to redact: redact copies nothing
	}
	pairs := make([]string, 0, 2*len(secrets))
	for _, s := range slices.Compact(secrets) {
		pairs = append(pairs, s, "***")
	}
	return strings.NewReplacer(pairs...)
}

// redact removes the configured credentials from b.
func (t *HTTP) redact(b []byte) []byte {
	if t.secrets == nil {
		return b
	}
	return []byte(t.secrets.Replace(string(b)))
}

// validHeaderName reports whether name is an RFC 7230 token.
func validHeaderName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
			continue
		}
		if !strings.ContainsRune("!#$%&'*+-.^_`|~", rune(c)) {
			return false
		}
	}
	return true
}

// Call POSTs req to the target's URL.
//
// A 2xx answer is a success. Connection errors, the timeout and the statuses
// Classify calls transient are transient failures, with the delay of a
// Retry-After header; other statuses are permanent failures. The error of a
// failed response holds its status and an excerpt of its body.
func (t *HTTP) Call(ctx context.Context, req Request) (Result, error) {
	if ctx.Err() != nil {
		return Result{}, canceledError(ctx, "POST "+t.shown)
	}
	b, err := req.encode()
	if err != nil {
		return Result{}, converge.Permanent(err)
	}

	callCtx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	hreq, err := http.NewRequestWithContext(callCtx, http.MethodPost, t.urlString, bytes.NewReader(b))
	if err != nil {
		return Result{}, converge.Permanent(fmt.Errorf("POST %s: %w", t.shown, err))
	}
	hreq.Header = t.requestHeader(callCtx, req)
	if t.host != "" {
		hreq.Host = t.host
	}
	if t.signer != nil {
		t.signer.Sign(hreq.Header, req.RunID.String(), time.Now(), b)
	}
	// The call's span, under the attempt's; the target's side of the call
	// joins the trace under it. It ends with the call, body read.
	span := t.startCallSpan(callCtx, hreq.Header)
	if span != nil {
		defer span.End()
	}

	resp, err := t.client.Do(hreq)
	if err != nil {
		ae := t.callError(ctx, callCtx, err)
		setCallStatus(span, 0, ae)
		return Result{}, ae
	}
	setCallStatus(span, resp.StatusCode, nil)
	defer func() {
		_, _ = io.CopyN(io.Discard, resp.Body, maxDrainBytes)
		_ = resp.Body.Close()
	}()

	status := resp.StatusCode
	class := Classify(status, t.transient, t.permanent)
	if class == "" {
		data, err := readBody(resp, MaxOutputBytes+1)
		if err != nil && ctx.Err() != nil {
			return Result{}, canceledError(ctx, "POST "+t.shown)
		}
		// The target said it succeeded; an unreadable body only costs the
		// output.
		if err != nil {
			return Result{}, nil
		}
		return Result{Output: output(t.redact(data))}, nil
	}

	data, _ := io.ReadAll(io.LimitReader(resp.Body, 2*maxExcerptBytes))
	data = t.redact(data)
	if ctx.Err() != nil {
		return Result{}, canceledError(ctx, "POST "+t.shown)
	}
	msg := fmt.Sprintf("POST %s: %s", t.shown, statusText(status))
	if e := excerpt(data, maxExcerptBytes); e != "" {
		msg += ": " + e
	}
	ae := attemptError(class, msg, &StatusError{Status: status})
	ae.Err.HTTPStatus = &status
	if class == converge.ClassTransient {
		ae.RetryAfter = ParseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
	}
	return Result{}, ae
}

// requestHeader returns the headers of the call of req before its
// signature and traceparent: the configured ones, Content-Type,
// Idempotency-Key and Converge-Attempt. It is http.Header.Clone and three
// Sets, in one map sized for every header of the call and one slice for
// every value, rather than a map that grows and a slice per value. The
// map is sized exactly (a map of up to 8 is a single group): three more,
// three for a signature, two (traceparent, tracestate) for a trace.
func (t *HTTP) requestHeader(ctx context.Context, req Request) http.Header {
	n := 0
	for _, vs := range t.header {
		n += len(vs)
	}
	size := len(t.header) + 3
	if t.signer != nil {
		size += 3
	}
	if trace.SpanContextFromContext(ctx).IsValid() {
		size += 2
	}
	h := make(http.Header, size)
	vals := make([]string, 0, n+3)
	for k, vs := range t.header {
		vals = append(vals, vs...)
		h[k] = vals[len(vals)-len(vs) : len(vals) : len(vals)]
	}
	set := func(k, v string) { // k is canonical
		vals = append(vals, v)
		h[k] = vals[len(vals)-1 : len(vals) : len(vals)]
	}
	set("Content-Type", "application/json")
	set("Idempotency-Key", req.RunID.String())
	set("Converge-Attempt", strconv.Itoa(req.Attempt))
	return h
}

// readBody reads at most limit bytes of resp's body, as
// io.ReadAll(io.LimitReader(resp.Body, limit)) does, into a slice of the
// body's length when the response says it.
func readBody(resp *http.Response, limit int64) ([]byte, error) {
	n := resp.ContentLength
	if n < 0 || n > limit {
		return io.ReadAll(io.LimitReader(resp.Body, limit))
	}
	if n == 0 {
		return nil, nil // the transport gave it http.NoBody
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(resp.Body, b); err != nil {
		return nil, err
	}
	return b, nil
}

// callError classifies an error from sending a request and reading its
// response headers.
func (t *HTTP) callError(ctx, callCtx context.Context, err error) *converge.AttemptError {
	if ctx.Err() != nil {
		return canceledError(ctx, "POST "+t.shown)
	}
	if callCtx.Err() != nil {
		return timeoutError("POST "+t.shown, t.timeout)
	}
	// A *url.Error repeats the whole URL, query included; keep what it wraps.
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		err = fmt.Errorf("%w: %w", ErrTimeout, err)
	}
	return converge.Transient(fmt.Errorf("POST %s: %w", t.shown, err))
}

// StatusError is the cause of the error of a call answered with a failure
// status.
type StatusError struct {
	Status int
}

// Error implements error.
func (e *StatusError) Error() string { return "http status " + statusText(e.Status) }

// statusText returns "503 Service Unavailable", or just the number for an
// unknown status.
func statusText(status int) string {
	if text := http.StatusText(status); text != "" {
		return strconv.Itoa(status) + " " + text
	}
	return strconv.Itoa(status)
}

// excerpt returns b as valid, single-line UTF-8 of at most n bytes, ending
// in "…" when it had to be cut.
func excerpt(b []byte, n int) string {
	s := strings.Join(strings.Fields(strings.ToValidUTF8(string(b), "\uFFFD")), " ")
	if len(s) <= n {
		return s
	}
	const ellipsis = "…"
	i := n - len(ellipsis)
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + ellipsis
}
