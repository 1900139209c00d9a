package target

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// TestHTTPCallSpan: with a span in the call's context (the attempt's),
// the call records the HTTP attributes on it, without a query or user
// info (where credentials may be), with the response's status, makes no
// span of its own, and sends that span's context as its traceparent;
// an attempt not sampled still sends it, flagged so. Without a span in the
// context, nothing is sent.
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
		ctx, span := tp.Tracer("test").Start(context.Background(), "converge.attempt", trace.WithSpanKind(trace.SpanKindClient))
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

	spans := exp.GetSpans()
	if len(spans) != 2 || len(got) != 4 {
		t.Fatalf("%d spans and %d calls, want 2 (the attempts') and 4", len(spans), len(got))
	}
	for i, s := range spans {
		if s.SpanContext.SpanID() != attempts[i].SpanID() {
			t.Fatalf("span %d is not attempt %d's", i, i)
		}
		if want := "00-" + attempts[i].TraceID().String() + "-" + attempts[i].SpanID().String() + "-01"; got[i] != want {
			t.Errorf("call %d: traceparent %q, want the attempt span's %q", i, got[i], want)
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
	}
	if got[2] != "" {
		t.Errorf("an untraced call sent traceparent %q", got[2])
	}
	if want := "00-" + uspan.SpanContext().TraceID().String() + "-" + uspan.SpanContext().SpanID().String() + "-00"; got[3] != want {
		t.Errorf("a call of an attempt not sampled sent traceparent %q, want %q", got[3], want)
	}
}
