package telemetry

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/converge-run/converge"
)

// These tests change the global tracer provider: they do not run in
// parallel with each other (the package's other tests record no spans).

func TestTracingOffCostsNothing(t *testing.T) {
	if TracingEnabled(func(string) string { return "" }) {
		t.Fatal("tracing enabled without OTEL_EXPORTER_OTLP_ENDPOINT")
	}
	env := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "true"}
	if TracingEnabled(func(k string) string { return env[k] }) {
		t.Error("tracing enabled with OTEL_SDK_DISABLED=true")
	}
	env = map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_EXPORTER": "none"}
	if TracingEnabled(func(k string) string { return env[k] }) {
		t.Error("tracing enabled with OTEL_TRACES_EXPORTER=none")
	}
	tr, err := StartTracing(context.Background(), func(string) string { return "" }, "test", slog.New(slog.DiscardHandler))
	if err != nil || tr != nil {
		t.Fatalf("StartTracing without the endpoint: %v, %v; want nil, nil", tr, err)
	}
	run := &converge.Run{ID: uuid.New(), TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
	ctx := context.Background()
	got, span := StartAttempt(ctx, run, 1)
	if got != ctx || span.IsRecording() || span.SpanContext().IsValid() {
		t.Error("with tracing off StartAttempt changed the context or recorded")
	}
	if n := testing.AllocsPerRun(100, func() {
		_, s := StartAttempt(ctx, run, 1)
		EndAttempt(s, converge.OutcomeSucceeded, converge.RunSucceeded, nil)
		_, s = StartAccept(ctx, "build", "app", 1)
		EndAccept(s, nil, nil)
	}); n != 0 {
		t.Errorf("with tracing off a span costs %v allocations, want 0", n)
	}
	if tp := TraceParent(ctx); tp != "" {
		t.Errorf("TraceParent without a span = %q", tp)
	}
}

// TestTracesProtocol: the standard protocol variables choose OTLP/HTTP or
// OTLP/gRPC (the traces' own variable first); any other value stops
// start-up naming the variable that set it, as does an endpoint that is
// not an http or https URL.
func TestTracesProtocol(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env     map[string]string
		want    string // the protocol, or a substring of the error
		wantErr bool
	}{
		{env: map[string]string{}, want: ProtocolHTTPProtobuf},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, want: ProtocolHTTPProtobuf},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, want: ProtocolGRPC},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": " grpc "}, want: ProtocolGRPC},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"}, want: ProtocolGRPC},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, want: `OTEL_EXPORTER_OTLP_PROTOCOL: "http/json" is not supported`, wantErr: true},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "thrift"}, want: "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", wantErr: true},
	} {
		got, err := tracesProtocol(func(k string) string { return tc.env[k] })
		switch {
		case tc.wantErr && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%v: error %v, want one saying %q", tc.env, err, tc.want)
		case !tc.wantErr && (err != nil || got != tc.want):
			t.Errorf("%v: %q, %v; want %q", tc.env, got, err, tc.want)
		}
	}
	for _, tc := range []struct {
		env  map[string]string
		want string // a substring of the error, "" for none
	}{
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, want: "OTEL_EXPORTER_OTLP_ENDPOINT: "},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "collector:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, want: "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: "},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "ftp://127.0.0.1"}, want: "not an http or https URL"},
	} {
		getenv := func(k string) string { return tc.env[k] }
		protocol, err := tracesProtocol(getenv)
		if err != nil {
			t.Fatalf("%v: %v", tc.env, err)
		}
		exp, err := newExporter(t.Context(), protocol, getenv)
		if exp != nil {
			_ = exp.Shutdown(t.Context())
		}
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%v: error %v, want %q", tc.env, err, tc.want)
		}
	}
}

// withRecorder installs a provider recording to memory for the test.
func withRecorder(t *testing.T) *tracetest.InMemoryExporter {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(redactingExporter{exp}))
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	tracingOn.Store(true)
	t.Cleanup(func() {
		tracingOn.Store(false)
		otel.SetTracerProvider(prev)
		_ = tp.Shutdown(context.Background())
	})
	return exp
}

func TestAttemptJoinsTheRunsTrace(t *testing.T) {
	exp := withRecorder(t)
	// The accept: its context is what the run keeps.
	ctx, accept := StartAccept(context.Background(), "build", "app/web", 3)
	tp := TraceParent(ctx)
	accept.End()
	sc := SpanContextOf(tp)
	if !sc.IsValid() || sc.SpanID() != accept.SpanContext().SpanID() || converge.TraceIDOf(tp) != sc.TraceID().String() {
		t.Fatalf("TraceParent %q does not round-trip the accept's span context %v", tp, accept.SpanContext())
	}
	// An attempt, later, from nothing but the stored traceparent (in
	// another process: a background context), and a redriven run's.
	run := &converge.Run{ID: uuid.New(), EventID: uuid.New(), Kind: "build", Resource: "app/web", Version: 3, Number: 1, TraceParent: tp}
	actx, attempt := StartAttempt(context.Background(), run, 2)
	EndAttempt(attempt, converge.OutcomeTransientError, converge.RunRetrying, nil)
	if TraceID(actx) != sc.TraceID().String() {
		t.Errorf("attempt trace %s, want the accept's %s", TraceID(actx), sc.TraceID())
	}
	redriven := &converge.Run{ID: uuid.New(), Number: 2, TraceParent: "00-5ce0e9a56015fec5aadfa328ae398115-0102030405060708-01", TraceLink: tp}
	_, attempt2 := StartAttempt(context.Background(), redriven, 1)
	attempt2.End()
	// A run kept no context (tracing was off when it was made): a trace
	// of its own, not a child of the caller's span.
	pctx, parent := Tracer().Start(context.Background(), "caller")
	_, orphan := StartAttempt(pctx, &converge.Run{ID: uuid.New()}, 1)
	orphan.End()
	parent.End()

	spans := exp.GetSpans()
	byName := map[string][]tracetest.SpanStub{}
	for _, s := range spans {
		byName[s.Name] = append(byName[s.Name], s)
	}
	a := byName["converge.attempt"]
	if len(a) != 3 {
		t.Fatalf("attempt spans %d, want 3", len(a))
	}
	if a[0].Parent.SpanID() != sc.SpanID() || a[0].SpanContext.TraceID() != sc.TraceID() || !a[0].Parent.IsRemote() {
		t.Errorf("attempt parent %v, want the accept's %v (remote)", a[0].Parent, sc)
	}
	if attrs := attrMap(a[0].Attributes); attrs["converge.attempt"] != "2" || attrs["converge.outcome"] != "transient_error" ||
		attrs["converge.status"] != "retrying" || attrs["converge.run_id"] != run.ID.String() {
		t.Errorf("attempt attributes %v", attrs)
	}
	if a[1].SpanContext.TraceID().String() != "5ce0e9a56015fec5aadfa328ae398115" || len(a[1].Links) != 1 || a[1].Links[0].SpanContext.SpanID() != sc.SpanID() {
		t.Errorf("redriven attempt: trace %s links %v, want the redrive's trace linking to the accept", a[1].SpanContext.TraceID(), a[1].Links)
	}
	if a[2].Parent.IsValid() || a[2].SpanContext.TraceID() == parent.SpanContext().TraceID() {
		t.Errorf("attempt of a run without a context has parent %v, want a root", a[2].Parent)
	}
}

func TestSpanURLsRedacted(t *testing.T) {
	exp := withRecorder(t)
	_, s := Tracer().Start(context.Background(), "HTTP POST", trace.WithAttributes(
		attribute.String("url.full", "https://user:pw@target.example/build?token=s3cret&x=1"),
		attribute.String("url.query", "token=s3cret"), attribute.String("url.path", "/build")))
	s.End()
	_, plain := Tracer().Start(context.Background(), "plain", trace.WithAttributes(attribute.String("url.full", "http://target/build")))
	plain.End()
	spans := exp.GetSpans()
	if len(spans) != 2 {
		t.Fatalf("spans %d", len(spans))
	}
	got := attrMap(spans[0].Attributes)
	if got["url.full"] != "https://target.example/build" || got["url.query"] != "REDACTED" || got["url.path"] != "/build" {
		t.Errorf("redacted attributes %v", got)
	}
	if got := attrMap(spans[1].Attributes); got["url.full"] != "http://target/build" {
		t.Errorf("a URL without a query became %q", got["url.full"])
	}
}

func attrMap(kvs []attribute.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		m[string(kv.Key)] = kv.Value.String()
	}
	return m
}

// TestSpanContextOfMatchesThePropagator: the parse of stored traceparents
// without the propagator answers as the propagator does, for the form it
// takes and for every other.
func TestSpanContextOfMatchesThePropagator(t *testing.T) {
	for _, tp := range []string{
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-ff",
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g",
		"00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
		"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-future",
		"00-4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7-01",
		"not a traceparent",
	} {
		want := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": tp}))
		if got := SpanContextOf(tp); !got.Equal(want) {
			t.Errorf("SpanContextOf(%q) = %v, the propagator's %v", tp, got, want)
		}
	}
	run := &converge.Run{TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
	if n := testing.AllocsPerRun(100, func() { _ = SpanContextOf(run.TraceParent) }); n != 0 {
		t.Errorf("SpanContextOf of a stored traceparent: %v allocations, want 0", n)
	}
}

// TestBatchDefaults: converge's batch sizes apply where the environment
// sets none, and OTEL_BSP_* win.
func TestBatchDefaults(t *testing.T) {
	if n := len(batchOptions(func(string) string { return "" })); n != 2 {
		t.Errorf("%d batch options without OTEL_BSP_*, want 2", n)
	}
	env := map[string]string{"OTEL_BSP_MAX_QUEUE_SIZE": "100", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "10"}
	if n := len(batchOptions(func(k string) string { return env[k] })); n != 0 {
		t.Errorf("%d batch options with OTEL_BSP_* set, want 0", n)
	}
}

// TestTraceParentFormat: TraceParent writes what the propagator writes.
func TestTraceParentFormat(t *testing.T) {
	for _, tp := range []string{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"} {
		ctx := trace.ContextWithRemoteSpanContext(context.Background(), SpanContextOf(tp))
		carrier := propagation.MapCarrier{}
		propagation.TraceContext{}.Inject(ctx, carrier)
		if got := TraceParent(ctx); got != tp || got != carrier.Get("traceparent") {
			t.Errorf("TraceParent = %q, the propagator's %q, want %q", got, carrier.Get("traceparent"), tp)
		}
	}
}
