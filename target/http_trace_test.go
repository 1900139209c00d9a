package target

import (
	"context"
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

// TestHTTPClientSpan: with a recording span in the call's context, each
// call is a client span, child of that span, whose context the request
// carries as its traceparent; its URL has no query or user info (where
// credentials may be), and it records the response's status. Without
// one, no span and no traceparent.
func TestHTTPClientSpan(t *testing.T) {
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
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	u := strings.Replace(srv.URL, "http://", "http://user:pa55word@", 1)
	ok := newHTTP(t, HTTPConfig{URL: u + "/build?token=s3cret-token"})
	bad := newHTTP(t, HTTPConfig{URL: u + "/bad?token=s3cret-token"})
	ctx, parent := tp.Tracer("test").Start(context.Background(), "converge.attempt")
	if _, err := ok.Call(ctx, testRequest()); err != nil {
		t.Fatal(err)
	}
	if _, err := bad.Call(ctx, testRequest()); err == nil {
		t.Fatal("the 400 call succeeded")
	}
	parent.End()
	// Untraced: no span in the context.
	if _, err := ok.Call(context.Background(), testRequest()); err != nil {
		t.Fatal(err)
	}
	// An attempt not sampled: no span recorded, but the target still
	// gets the trace, flagged not sampled.
	unsampled := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSampler(sdktrace.NeverSample()))
	t.Cleanup(func() { _ = unsampled.Shutdown(context.Background()) })
	uctx, uparent := unsampled.Tracer("test").Start(context.Background(), "converge.attempt")
	if _, err := ok.Call(uctx, testRequest()); err != nil {
		t.Fatal(err)
	}
	uparent.End()

	spans := exp.GetSpans()
	var clients []tracetest.SpanStub
	for _, s := range spans {
		if s.SpanKind == trace.SpanKindClient {
			clients = append(clients, s)
		}
	}
	if len(clients) != 2 || len(got) != 4 {
		t.Fatalf("%d client spans and %d calls, want 2 and 4", len(clients), len(got))
	}
	for i, s := range clients {
		if s.Name != "HTTP POST" || s.Parent.SpanID() != parent.SpanContext().SpanID() || s.SpanContext.TraceID() != parent.SpanContext().TraceID() {
			t.Errorf("client span %d: %s under %s, want HTTP POST under the attempt %s", i, s.Name, s.Parent.SpanID(), parent.SpanContext().SpanID())
		}
		want := "00-" + s.SpanContext.TraceID().String() + "-" + s.SpanContext.SpanID().String() + "-01"
		if got[i] != want {
			t.Errorf("call %d: traceparent %q, want the client span's %q", i, got[i], want)
		}
		attrs := map[attribute.Key]string{}
		for _, kv := range s.Attributes {
			attrs[kv.Key] = kv.Value.Emit()
		}
		path := []string{"/build", "/bad"}[i]
		status := []string{"200", "400"}[i]
		if attrs["url.full"] != srv.URL+path || attrs["http.request.method"] != "POST" || attrs["http.response.status_code"] != status ||
			attrs["server.address"] != "127.0.0.1" || attrs["server.port"] == "" {
			t.Errorf("client span %d attributes %v", i, attrs)
		}
		for _, kv := range s.Attributes {
			if v := kv.Value.Emit(); strings.Contains(v, "s3cret") || strings.Contains(v, "pa55word") {
				t.Errorf("client span %d attribute %s = %q holds a credential", i, kv.Key, v)
			}
		}
	}
	if clients[0].Status.Code == codes.Error || clients[1].Status.Code != codes.Error {
		t.Errorf("span statuses %v, %v; want unset and error", clients[0].Status, clients[1].Status)
	}
	if got[2] != "" {
		t.Errorf("an untraced call sent traceparent %q", got[2])
	}
	if tid := uparent.SpanContext().TraceID().String(); !strings.HasPrefix(got[3], "00-"+tid+"-") || !strings.HasSuffix(got[3], "-00") ||
		strings.Contains(got[3], uparent.SpanContext().SpanID().String()) {
		t.Errorf("a call of an attempt not sampled sent traceparent %q, want a child of trace %s flagged 00", got[3], tid)
	}
}
