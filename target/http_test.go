package target

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/converge-run/converge"
)

// newServer starts a loopback server with handler h, closed at cleanup.
func newServer(t *testing.T, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// newHangingServer starts a loopback server whose handler reads the request,
// calls before, if not nil, and then waits, without answering, for the client
// to go away or the test to end.
func newHangingServer(t *testing.T, before func(w http.ResponseWriter)) *httptest.Server {
	t.Helper()
	done := make(chan struct{})
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		// Until the body is read, the server does not notice the client
		// closing the connection.
		_, _ = io.Copy(io.Discard, r.Body)
		if before != nil {
			before(w)
		}
		select {
		case <-r.Context().Done():
		case <-done:
		}
	})
	t.Cleanup(func() { close(done) }) // runs before srv.Close
	return srv
}

// newHTTP returns an HTTP target for cfg, failing the test on error.
func newHTTP(t *testing.T, cfg HTTPConfig) *HTTP {
	t.Helper()
	h, err := NewHTTP(cfg)
	if err != nil {
		t.Fatalf("NewHTTP: %v", err)
	}
	return h
}

func TestHTTPRequest(t *testing.T) {
	t.Parallel()
	req := testRequest()
	type seen struct {
		method, path, query, host string
		header                    http.Header
		body                      []byte
	}
	got := make(chan seen, 1)
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{r.Method, r.URL.Path, r.URL.RawQuery, r.Host, r.Header.Clone(), b}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"deployed":"abc123"}`)
	})
	h := newHTTP(t, HTTPConfig{
		URL:     srv.URL + "/hooks/build?x=1",
		Headers: map[string]string{"Authorization": "Bearer s3cret", "x-extra": "yes", "Host": "build.example"},
	})

	res, err := h.Call(t.Context(), req)
	if err != nil {
		t.Fatalf("Call: %v", err)
	}
	if string(res.Output) != `{"deployed":"abc123"}` {
		t.Errorf("Output = %s", res.Output)
	}
	s := <-got
	if s.method != http.MethodPost || s.path != "/hooks/build" || s.query != "x=1" || s.host != "build.example" {
		t.Errorf("request line: %s %s?%s host %s", s.method, s.path, s.query, s.host)
	}
	for k, want := range map[string]string{
		"Content-Type":     "application/json",
		"Idempotency-Key":  req.RunID.String(),
		"Converge-Attempt": "3",
		"Authorization":    "Bearer s3cret",
		"X-Extra":          "yes",
		"User-Agent":       "converge",
	} {
		if v := s.header.Get(k); v != want {
			t.Errorf("header %s = %q, want %q", k, v, want)
		}
	}
	checkBody(t, s.body, req)
}

func TestHTTPStatus(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		status    int
		transient []int
		permanent []int
		want      converge.ErrorClass // "" for success
	}{
		{name: "200", status: 200},
		{name: "204", status: 204},
		{name: "302 not followed", status: 302, want: converge.ClassPermanent},
		{name: "400", status: 400, want: converge.ClassPermanent},
		{name: "404", status: 404, want: converge.ClassPermanent},
		{name: "408", status: 408, want: converge.ClassTransient},
		{name: "425", status: 425, want: converge.ClassTransient},
		{name: "429", status: 429, want: converge.ClassTransient},
		{name: "500", status: 500, want: converge.ClassTransient},
		{name: "503", status: 503, want: converge.ClassTransient},
		{name: "409 listed transient", status: 409, transient: []int{409}, want: converge.ClassTransient},
		{name: "202 listed transient", status: 202, transient: []int{202}, want: converge.ClassTransient},
		{name: "501 listed permanent", status: 501, permanent: []int{501}, want: converge.ClassPermanent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				if tt.status == 302 {
					w.Header().Set("Location", "/elsewhere")
				}
				w.WriteHeader(tt.status)
				if tt.status != 204 {
					_, _ = io.WriteString(w, "the body\n")
				}
			})
			h := newHTTP(t, HTTPConfig{URL: srv.URL, TransientStatuses: tt.transient, PermanentStatuses: tt.permanent})
			res, err := h.Call(t.Context(), testRequest())
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Call: %v", err)
				}
				if res.Output != nil {
					t.Errorf("Output = %q, want nil for a body that is not JSON", res.Output)
				}
				return
			}
			ae := attemptErr(t, err)
			if ae.Err.Class != tt.want {
				t.Errorf("class = %s, want %s (%v)", ae.Err.Class, tt.want, err)
			}
			if ae.Err.HTTPStatus == nil || *ae.Err.HTTPStatus != tt.status {
				t.Errorf("HTTPStatus = %v, want %d", ae.Err.HTTPStatus, tt.status)
			}
			if !strings.Contains(ae.Err.Message, fmt.Sprint(tt.status)) || !strings.Contains(ae.Err.Message, "the body") {
				t.Errorf("message %q lacks status or body excerpt", ae.Err.Message)
			}
			var se *StatusError
			if !errors.As(err, &se) || se.Status != tt.status {
				t.Errorf("cause is not a *StatusError for %d: %v", tt.status, err)
			}
		})
	}
}

func TestHTTPRetryAfter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		status    int
		header    func() string
		min, max  time.Duration
		wantClass converge.ErrorClass
	}{
		{name: "seconds on 503", status: 503, header: func() string { return "7" }, min: 7 * time.Second, max: 7 * time.Second, wantClass: converge.ClassTransient},
		{name: "seconds on 429", status: 429, header: func() string { return "120" }, min: 2 * time.Minute, max: 2 * time.Minute, wantClass: converge.ClassTransient},
		{name: "http date", status: 503, header: func() string {
			return time.Now().Add(30 * time.Second).UTC().Format(http.TimeFormat)
		}, min: 20 * time.Second, max: 30 * time.Second, wantClass: converge.ClassTransient},
		{name: "past date", status: 503, header: func() string {
			return time.Now().Add(-time.Hour).UTC().Format(http.TimeFormat)
		}, wantClass: converge.ClassTransient},
		{name: "garbage", status: 503, header: func() string { return "later" }, wantClass: converge.ClassTransient},
		{name: "ignored when permanent", status: 400, header: func() string { return "7" }, wantClass: converge.ClassPermanent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Retry-After", tt.header())
				w.WriteHeader(tt.status)
			})
			_, err := newHTTP(t, HTTPConfig{URL: srv.URL}).Call(t.Context(), testRequest())
			ae := attemptErr(t, err)
			if ae.Err.Class != tt.wantClass {
				t.Errorf("class = %s, want %s", ae.Err.Class, tt.wantClass)
			}
			if got := ae.RetryAfter; got < tt.min || got > tt.max {
				t.Errorf("RetryAfter = %s, want in [%s, %s]", got, tt.min, tt.max)
			}
		})
	}
}

func TestHTTPOutput(t *testing.T) {
	t.Parallel()
	// jsonString returns a JSON string document of exactly n bytes.
	jsonString := func(n int) string { return `"` + strings.Repeat("a", n-2) + `"` }
	tests := []struct {
		name string
		body string
		want string // "" for a nil Output
	}{
		{name: "object", body: `{"a":1}`, want: `{"a":1}`},
		{name: "array with spaces", body: " [1, 2]\n", want: " [1, 2]\n"},
		{name: "exactly 64 KiB", body: jsonString(MaxOutputBytes), want: jsonString(MaxOutputBytes)},
		{name: "64 KiB plus one", body: jsonString(MaxOutputBytes + 1)},
		{name: "1 MiB", body: jsonString(1 << 20)},
		{name: "not JSON", body: "OK"},
		{name: "truncated JSON", body: `{"a":`},
		{name: "empty", body: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.WriteString(w, tt.body)
			})
			res, err := newHTTP(t, HTTPConfig{URL: srv.URL}).Call(t.Context(), testRequest())
			if err != nil {
				t.Fatalf("Call: %v", err)
			}
			if tt.want == "" && res.Output != nil {
				t.Errorf("Output has %d bytes, want nil", len(res.Output))
			}
			if tt.want != "" && string(res.Output) != tt.want {
				t.Errorf("Output has %d bytes, want %d", len(res.Output), len(tt.want))
			}
		})
	}
}

func TestHTTPErrorExcerpt(t *testing.T) {
	t.Parallel()
	body := "upstream exploded:" + strings.Repeat(" é detail", 400) // 4 KiB, multi-byte runes
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadGateway)
		_, _ = io.WriteString(w, body)
	})
	_, err := newHTTP(t, HTTPConfig{URL: srv.URL + "/x?token=hidden"}).Call(t.Context(), testRequest())
	ae := attemptErr(t, err)
	msg := ae.Err.Message
	prefix := "POST " + srv.URL + "/x: 502 Bad Gateway: "
	if !strings.HasPrefix(msg, prefix) {
		t.Fatalf("message %q does not start with %q", msg, prefix)
	}
	ex := strings.TrimPrefix(msg, prefix)
	if len(ex) > 512 || !strings.HasPrefix(ex, "upstream exploded: é detail") || !strings.HasSuffix(ex, "…") {
		t.Errorf("excerpt of %d bytes: %q", len(ex), ex)
	}
	if strings.Contains(msg, "hidden") {
		t.Errorf("message shows the query string: %q", msg)
	}
	if *ae.Err.HTTPStatus != 502 || ae.Err.Class != converge.ClassTransient {
		t.Errorf("got %s %d", ae.Err.Class, *ae.Err.HTTPStatus)
	}
}

func TestHTTPTimeout(t *testing.T) {
	t.Parallel()
	srv := newHangingServer(t, nil)
	h := newHTTP(t, HTTPConfig{URL: srv.URL, Timeout: 100 * time.Millisecond})
	start := time.Now()
	_, err := h.Call(t.Context(), testRequest())
	elapsed := time.Since(start)
	ae := attemptErr(t, err)
	if ae.Err.Class != converge.ClassTransient || ae.Err.HTTPStatus != nil {
		t.Errorf("got %s, status %v: %v", ae.Err.Class, ae.Err.HTTPStatus, err)
	}
	if !errors.Is(err, ErrTimeout) {
		t.Errorf("error %v does not wrap ErrTimeout", err)
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		t.Errorf("a target timeout must not look like the caller's context ending: %v", err)
	}
	if elapsed > slack {
		t.Errorf("call took %s with a 100ms timeout", elapsed)
	}
}

func TestHTTPTimeoutReadingBody(t *testing.T) {
	t.Parallel()
	srv := newHangingServer(t, func(w http.ResponseWriter) {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, "partial")
		w.(http.Flusher).Flush()
	})
	h := newHTTP(t, HTTPConfig{URL: srv.URL, Timeout: 3 * time.Second})
	_, err := h.Call(t.Context(), testRequest())
	ae := attemptErr(t, err)
	if ae.Err.Class != converge.ClassTransient || ae.Err.HTTPStatus == nil || *ae.Err.HTTPStatus != 503 {
		t.Errorf("got %+v", ae.Err)
	}
}

func TestHTTPConnectionRefused(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	h := newHTTP(t, HTTPConfig{
		URL:     "http://user:pw@" + addr + "/hook?token=q-secret",
		Headers: map[string]string{"Authorization": "Bearer h-secret"},
	})
	_, err = h.Call(t.Context(), testRequest())
	ae := attemptErr(t, err)
	if ae.Err.Class != converge.ClassTransient || ae.Err.HTTPStatus != nil {
		t.Errorf("got %s, status %v", ae.Err.Class, ae.Err.HTTPStatus)
	}
	for _, s := range []string{err.Error(), ae.Err.Message, ae.Cause.Error()} {
		if !strings.Contains(s, "refused") {
			t.Errorf("%q does not say the connection was refused", s)
		}
		for _, secret := range []string{"h-secret", "q-secret", "pw"} {
			if strings.Contains(s, secret) {
				t.Errorf("%q shows %q", s, secret)
			}
		}
	}
}

func TestHTTPCancel(t *testing.T) {
	t.Parallel()
	arrived := make(chan struct{})
	srv := newHangingServer(t, func(http.ResponseWriter) { close(arrived) })
	h := newHTTP(t, HTTPConfig{URL: srv.URL, Timeout: time.Minute})
	ctx := callCancelled(t, h, func() { <-arrived })

	// A context already done is not even sent.
	if _, err := h.Call(ctx, testRequest()); !errors.Is(err, context.Canceled) {
		t.Errorf("call with a done context: %v", err)
	}
}

func TestHTTPConcurrentPooling(t *testing.T) {
	t.Parallel()
	conns := make(chan struct{}, 1000)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, `{}`)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns <- struct{}{}
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	h := newHTTP(t, HTTPConfig{URL: srv.URL})

	const workers, calls = 100, 3
	errs := make(chan error, workers)
	for range workers {
		go func() {
			for range calls {
				if _, err := h.Call(t.Context(), testRequest()); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range workers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	// Connections are reused: far fewer than one per call.
	if n := len(conns); n > workers+workers/2 {
		t.Errorf("%d connections for %d calls", n, workers*calls)
	}
}

func TestNewHTTPInvalid(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  HTTPConfig
		want string
	}{
		{"no url", HTTPConfig{}, "url"},
		{"relative url", HTTPConfig{URL: "/hook"}, "url"},
		{"ftp url", HTTPConfig{URL: "ftp://example.com/x"}, "url"},
		{"bad url", HTTPConfig{URL: "http://[::1"}, "url"},
		{"negative timeout", HTTPConfig{URL: "http://x", Timeout: -time.Second}, "timeout"},
		{"bad status", HTTPConfig{URL: "http://x", TransientStatuses: []int{700}}, "transient_statuses"},
		{"bad permanent status", HTTPConfig{URL: "http://x", PermanentStatuses: []int{42}}, "permanent_statuses"},
		{"both lists", HTTPConfig{URL: "http://x", TransientStatuses: []int{409}, PermanentStatuses: []int{409}}, "409"},
		{"reserved header", HTTPConfig{URL: "http://x", Headers: map[string]string{"idempotency-key": "k"}}, "idempotency-key"},
		{"bad header name", HTTPConfig{URL: "http://x", Headers: map[string]string{"X Bad": "v"}}, "X Bad"},
		{"bad header value", HTTPConfig{URL: "http://x", Headers: map[string]string{"Authorization": "Bearer a\r\nX-Evil: 1"}}, "Authorization"},
	}
	for _, tt := range tests {
		_, err := NewHTTP(tt.cfg)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want one naming %q", tt.name, err, tt.want)
		}
		if err != nil && strings.Contains(err.Error(), "Bearer") {
			t.Errorf("%s: error shows a header value: %v", tt.name, err)
		}
	}
}
