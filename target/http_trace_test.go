package target

import (
	"context"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// TestHTTPCallSpan: with a span in the call's context (the attempt's),
// the call runs in a client span of its own, converge.http, a child of
// it, with the HTTP attributes, without a query or user info (where
// credentials may be), with the response's status (an error status for a
// failure), and sends that span's context as its traceparent; an attempt
// not sampled still sends one, of its trace and flagged so. Without a span
// in the context, nothing is sent.
func TestHTTPCallSpan(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got []string
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get("traceparent"))
		mu.Unlock()
		if strings.HasSuffix(r.URL.Path, "/bad") {
			http.Error(w, "no", http.StatusBadRequest)
		}
	})
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	unsampled := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSampler(sdktrace.NeverSample()))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()); _ = unsampled.Shutdown(context.Background()) })

	u := strings.Replace(srv.URL, "http://", "http://user:pa55word@", 1)
	ok := newHTTP(t, HTTPConfig{URL: u + "/build?token=s3cret-token"})
	bad := newHTTP(t, HTTPConfig{URL: u + "/bad?token=s3cret-token"})
	var attempts []trace.SpanContext
	for _, c := range []struct {
		h    *HTTP
		fail bool
	}{{ok, false}, {bad, true}} {
		ctx, span := tp.Tracer("test").Start(context.Background(), "converge.attempt")
		if _, err := c.h.Call(ctx, testRequest()); (err != nil) != c.fail {
			t.Fatalf("call: %v", err)
		}
		span.End()
		attempts = append(attempts, span.SpanContext())
	}
	if _, err := ok.Call(context.Background(), testRequest()); err != nil {
		t.Fatal(err)
	}
	uctx, uspan := unsampled.Tracer("test").Start(context.Background(), "converge.attempt")
	if _, err := ok.Call(uctx, testRequest()); err != nil {
		t.Fatal(err)
	}
	uspan.End()

	// Each call's span ends before its attempt's: call 1, attempt 1, ...
	spans := exp.GetSpans()
	if len(spans) != 4 || len(got) != 4 {
		t.Fatalf("%d spans and %d calls, want 4 (two calls' and their attempts') and 4", len(spans), len(got))
	}
	for i, a := range attempts {
		s, as := spans[2*i], spans[2*i+1]
		if as.SpanContext.SpanID() != a.SpanID() || s.Name != "converge.http" || s.SpanKind != trace.SpanKindClient ||
			s.Parent.SpanID() != a.SpanID() || s.SpanContext.TraceID() != a.TraceID() {
			t.Fatalf("call %d: span %q kind %v parent %s, want converge.http, client, a child of the attempt %s",
				i, s.Name, s.SpanKind, s.Parent.SpanID(), a.SpanID())
		}
		if want := "00-" + a.TraceID().String() + "-" + s.SpanContext.SpanID().String() + "-01"; got[i] != want {
			t.Errorf("call %d: traceparent %q, want the call span's %q", i, got[i], want)
		}
		if len(as.Attributes) != 0 {
			t.Errorf("attempt %d: the call recorded %v on the attempt's span", i, as.Attributes)
		}
		attrs := map[attribute.Key]string{}
		for _, kv := range s.Attributes {
			attrs[kv.Key] = kv.Value.String()
			if v := kv.Value.String(); strings.Contains(v, "s3cret") || strings.Contains(v, "pa55word") {
				t.Errorf("span %d attribute %s = %q holds a credential", i, kv.Key, v)
			}
		}
		path, status := []string{"/build", "/bad"}[i], []string{"200", "400"}[i]
		if attrs["url.full"] != srv.URL+path || attrs["http.request.method"] != "POST" || attrs["http.response.status_code"] != status ||
			attrs["server.address"] != "127.0.0.1" || attrs["server.port"] == "" || (i == 1) != (attrs["error.type"] == "400") {
			t.Errorf("span %d attributes %v", i, attrs)
		}
		if wantErr := i == 1; (s.Status.Code == codes.Error) != wantErr {
			t.Errorf("span %d status %v, want an error status: %v", i, s.Status, wantErr)
		}
	}
	if got[2] != "" {
		t.Errorf("an untraced call sent traceparent %q", got[2])
	}
	uprefix := "00-" + uspan.SpanContext().TraceID().String() + "-"
	if !strings.HasPrefix(got[3], uprefix) || !strings.HasSuffix(got[3], "-00") {
		t.Errorf("a call of an attempt not sampled sent traceparent %q, want %s<span>-00", got[3], uprefix)
	}
}

// TestHTTPCallSpanError: a call that gets no response (connection refused)
// has an error status and error.type on its span, and no status code.
func TestHTTPCallSpanError(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	h := newHTTP(t, HTTPConfig{URL: "http://" + addr + "/build"})
	ctx, span := tp.Tracer("test").Start(context.Background(), "converge.attempt")
	if _, err := h.Call(ctx, testRequest()); err == nil {
		t.Fatal("a call to a closed port succeeded")
	}
	span.End()
	spans := exp.GetSpans()
	if len(spans) != 2 || spans[0].Name != "converge.http" {
		t.Fatalf("spans %v, want converge.http and the attempt", spans)
	}
	s := spans[0]
	attrs := map[attribute.Key]string{}
	for _, kv := range s.Attributes {
		attrs[kv.Key] = kv.Value.String()
	}
	if s.Status.Code != codes.Error || attrs["error.type"] != "_OTHER" || attrs["http.response.status_code"] != "" {
		t.Errorf("span status %v attributes %v, want an error, error.type _OTHER, no status code", s.Status, attrs)
	}
}

// TestHTTPCallSpanOffCostsNothing: with no span in the call's context
// (tracing off) the call makes no span, adds no header and allocates
// nothing for it. Not parallel: AllocsPerRun.
func TestHTTPCallSpanOffCostsNothing(t *testing.T) {
	h := newHTTP(t, HTTPConfig{URL: "http://127.0.0.1:1/build"})
	hdr := http.Header{}
	ctx := context.Background()
	if n := testing.AllocsPerRun(100, func() {
		span := h.startCallSpan(ctx, hdr)
		setCallStatus(span, http.StatusServiceUnavailable, nil)
		if span != nil {
			span.End()
		}
	}); n != 0 {
		t.Errorf("the call's span with tracing off: %v allocations, want 0", n)
	}
	if span := h.startCallSpan(ctx, hdr); span != nil || len(hdr) != 0 {
		t.Errorf("with tracing off: span %v, header %v; want none", span, hdr)
	}
}
