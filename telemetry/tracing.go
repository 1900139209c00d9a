package telemetry

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// TracerName is the instrumentation scope of converge's own spans.
const TracerName = "github.com/converge-run/converge"

// Tracing is the OpenTelemetry set-up of a process (SPEC §14): an OTLP
// exporter (HTTP or gRPC) and a batching tracer provider, installed as the global one,
// with the W3C trace context propagator. Shutdown flushes it. A nil
// *Tracing (tracing off) does nothing.
type Tracing struct {
	provider *sdktrace.TracerProvider
	protocol string
}

// Protocol is the OTLP protocol the spans go out with: ProtocolHTTPProtobuf
// or ProtocolGRPC.
func (t *Tracing) Protocol() string { return t.protocol }

// TracingEnabled reports whether getenv asks for tracing: the standard
// OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is
// set, OTEL_SDK_DISABLED is not "true" and OTEL_TRACES_EXPORTER is not
// "none".
func TracingEnabled(getenv func(string) string) bool {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") ||
		strings.EqualFold(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")), "none") {
		return false
	}
	return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// StartTracing installs tracing when TracingEnabled(getenv), and returns
// nil (tracing off: the global no-op tracer, which costs nothing) otherwise.
// Every setting comes from the standard OpenTelemetry environment
// variables, read by the SDK itself: the endpoint, OTEL_EXPORTER_OTLP_HEADERS,
// OTEL_EXPORTER_OTLP_TIMEOUT, OTEL_SERVICE_NAME (default "converge"),
// OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER and OTEL_BSP_*. The
// protocol is OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or
// OTEL_EXPORTER_OTLP_PROTOCOL: http/protobuf (the default, OTLP/HTTP to
// <endpoint>/v1/traces) or grpc (OTLP/gRPC to the endpoint itself, port 4317
// of a collector); anything else (http/json, which the Go SDK lacks) is an
// error naming the variable. version is the service.version attribute.
//
// The SDK's own errors (an export that failed: the collector is down) go
// to logger, as warnings.
func StartTracing(ctx context.Context, getenv func(string) string, version string, logger *slog.Logger) (*Tracing, error) {
	if !TracingEnabled(getenv) {
		return nil, nil
	}
	protocol, err := tracesProtocol(getenv)
	if err != nil {
		return nil, err
	}
	exp, err := newExporter(ctx, protocol, getenv)
	if err != nil {
		return nil, err
	}
	attrs := []resource.Option{resource.WithFromEnv(), resource.WithTelemetrySDK(),
		resource.WithAttributes(semconv.ServiceVersion(version))}
	if getenv("OTEL_SERVICE_NAME") == "" {
		attrs = append(attrs, resource.WithAttributes(semconv.ServiceName("converge")))
	}
	res, err := resource.New(ctx, attrs...)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	if logger == nil {
		logger = slog.Default()
	}
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { logger.Warn("tracing: span export", "error", err) }))
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(redactingExporter{exp}, batchOptions(getenv)...), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	tracer.Store(&tracerBox{tp.Tracer(TracerName)})
	tracingOn.Store(true)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	return &Tracing{provider: tp, protocol: protocol}, nil
}

// The OTLP protocols converge exports traces with (the values of
// OTEL_EXPORTER_OTLP_PROTOCOL it takes).
const (
	ProtocolHTTPProtobuf = "http/protobuf"
	ProtocolGRPC         = "grpc"
)

// newExporter returns the OTLP trace exporter of protocol (tracesProtocol)
// to the endpoint getenv gives; the SDK reads the rest of its settings
// (headers, timeout, compression, certificates) from the process's
// environment itself.
func newExporter(ctx context.Context, protocol string, getenv func(string) string) (sdktrace.SpanExporter, error) {
	name, endpoint := "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	if endpoint == "" {
		// The general endpoint is a base: OTLP/HTTP appends the signal's
		// path to it, OTLP/gRPC uses it as it is.
		name, endpoint = "OTEL_EXPORTER_OTLP_ENDPOINT", getenv("OTEL_EXPORTER_OTLP_ENDPOINT")
		if protocol == ProtocolHTTPProtobuf {
			endpoint = strings.TrimSuffix(endpoint, "/") + "/v1/traces"
		}
	}
	if u, err := url.Parse(endpoint); err != nil || u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("%s: %q is not an http or https URL", name, endpoint)
	}
	var (
		exp sdktrace.SpanExporter
		err error
	)
	if protocol == ProtocolGRPC {
		// http:// is a connection without TLS, https:// one with it.
		exp, err = otlptracegrpc.New(ctx, otlptracegrpc.WithEndpointURL(endpoint))
	} else {
		exp, err = otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(endpoint))
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return exp, nil
}

// tracesProtocol is the OTLP protocol getenv asks for:
// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, else OTEL_EXPORTER_OTLP_PROTOCOL, else
// http/protobuf. A protocol converge does not speak is an error naming the
// variable that set it.
func tracesProtocol(getenv func(string) string) (string, error) {
	for _, name := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		switch v := strings.TrimSpace(getenv(name)); v {
		case "":
			continue
		case ProtocolHTTPProtobuf, ProtocolGRPC:
			return v, nil
		default:
			return "", fmt.Errorf("%s: %q is not supported; converge exports traces with %s (OTLP/HTTP, port 4318) or %s (OTLP/gRPC, port 4317)",
				name, v, ProtocolHTTPProtobuf, ProtocolGRPC)
		}
	}
	return ProtocolHTTPProtobuf, nil
}

// Converge's defaults for the batch span processor where the environment
// sets none (the SDK's are a queue of 2,048 spans and batches of 512): a
// busy worker ends thousands of spans a second, and a larger queue and
// batch make fewer, larger exports and leave room for a slow collector
// before spans are dropped. OTEL_BSP_MAX_QUEUE_SIZE and
// OTEL_BSP_MAX_EXPORT_BATCH_SIZE, when set, win (the SDK reads them).
const (
	DefaultBSPMaxQueueSize       = 8192
	DefaultBSPMaxExportBatchSize = 2048
)

// batchOptions are the batch span processor's options: converge's defaults
// for the settings getenv leaves unset.
func batchOptions(getenv func(string) string) []sdktrace.BatchSpanProcessorOption {
	var opts []sdktrace.BatchSpanProcessorOption
	if getenv("OTEL_BSP_MAX_QUEUE_SIZE") == "" {
		opts = append(opts, sdktrace.WithMaxQueueSize(DefaultBSPMaxQueueSize))
	}
	if getenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE") == "" {
		opts = append(opts, sdktrace.WithMaxExportBatchSize(DefaultBSPMaxExportBatchSize))
	}
	return opts
}

// redactingExporter removes the query (and any user info) from the URLs
// recorded on spans (url.full, url.query: otelhttp's server spans of the
// API, any instrumentation's) before they leave the process: a URL may
// carry a credential in its query, and no secret may leave converge in a
// trace any more than in a log. (The HTTP target's client spans record
// its URL without them in the first place.)
type redactingExporter struct {
	sdktrace.SpanExporter
}

// ExportSpans implements sdktrace.SpanExporter.
func (e redactingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	out := make([]sdktrace.ReadOnlySpan, len(spans))
	for i, s := range spans {
		out[i] = s
		if attrs, changed := redactAttributes(s.Attributes()); changed {
			out[i] = redactedSpan{ReadOnlySpan: s, attrs: attrs}
		}
	}
	return e.SpanExporter.ExportSpans(ctx, out)
}

// redactedSpan is a span with its attributes replaced.
type redactedSpan struct {
	sdktrace.ReadOnlySpan
	attrs []attribute.KeyValue
}

// Attributes implements sdktrace.ReadOnlySpan.
func (s redactedSpan) Attributes() []attribute.KeyValue { return s.attrs }

// redactAttributes returns attrs with url.full stripped of its query and
// user info and url.query replaced, and whether anything changed.
func redactAttributes(attrs []attribute.KeyValue) ([]attribute.KeyValue, bool) {
	var out []attribute.KeyValue
	for i, kv := range attrs {
		if kv.Key != "url.full" && kv.Key != "url.query" {
			continue
		}
		v, changed := kv.Value.AsString(), false
		switch kv.Key {
		case "url.full":
			u, err := url.Parse(v)
			switch {
			case err != nil:
				v, changed = "REDACTED", true
			case u.RawQuery != "" || u.User != nil || u.ForceQuery:
				u.User, u.RawQuery, u.ForceQuery = nil, "", false
				v, changed = u.String(), true
			}
		case "url.query":
			v, changed = "REDACTED", v != ""
		}
		if !changed {
			continue
		}
		if out == nil {
			out = append([]attribute.KeyValue(nil), attrs...)
		}
		out[i] = attribute.String(string(kv.Key), v)
	}
	return out, out != nil
}

// Shutdown exports the spans still buffered and stops the exporter, within
// ctx (or 5 seconds when ctx has no deadline).
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
	}
	tracingOn.Store(false)
	tracer.Store(nil)
	otel.SetTracerProvider(noop.NewTracerProvider())
	return t.provider.Shutdown(ctx)
}

// tracerBox holds the tracer of the provider StartTracing installed.
type tracerBox struct{ trace.Tracer }

// tracer is converge's tracer while tracing is on, looked up once rather
// than on every span (a provider's Tracer takes a lock).
var tracer atomic.Pointer[tracerBox]

// Tracer is converge's tracer, from the global provider (a no-op one when
// tracing is off).
func Tracer() trace.Tracer {
	if b := tracer.Load(); b != nil {
		return b.Tracer
	}
	return otel.Tracer(TracerName)
}

// TraceParent returns the W3C traceparent of the span in ctx, or "" when
// ctx has no valid span context (tracing off, or no span).
func TraceParent(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return ""
	}
	return formatTraceParent(sc)
}

// formatTraceParent writes sc as a W3C traceparent, in one allocation.
func formatTraceParent(sc trace.SpanContext) string {
	var b [55]byte
	tid, sid, flags := sc.TraceID(), sc.SpanID(), sc.TraceFlags()
	copy(b[:], "00-")
	hex.Encode(b[3:35], tid[:])
	b[35] = '-'
	hex.Encode(b[36:52], sid[:])
	b[52] = '-'
	hex.Encode(b[53:55], []byte{byte(flags)})
	return string(b[:])
}

// SpanContextOf parses a W3C traceparent into a remote span context; the
// zero (invalid) one when tp is empty or not a traceparent.
func SpanContextOf(tp string) trace.SpanContext {
	if tp == "" {
		return trace.SpanContext{}
	}
	// The stored form, as formatTraceParent writes it, parsed without the
	// propagator's carrier map; anything else goes to the propagator,
	// which knows every rule of the format.
	if len(tp) == 55 && tp[:3] == "00-" && tp[35] == '-' && tp[52] == '-' && tp[53] == '0' && (tp[54] == '0' || tp[54] == '1') {
		tid, err1 := trace.TraceIDFromHex(tp[3:35])
		sid, err2 := trace.SpanIDFromHex(tp[36:52])
		if err1 == nil && err2 == nil {
			return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid,
				TraceFlags: trace.TraceFlags(tp[54] - '0'), Remote: true})
		}
	}
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": tp})
	return trace.SpanContextFromContext(ctx)
}

// ContextWithTraceParent returns ctx with tp, a stored W3C traceparent, as
// its remote parent span: a span started from it joins tp's trace. ctx is
// returned as is when tp is empty or invalid.
func ContextWithTraceParent(ctx context.Context, tp string) context.Context {
	sc := SpanContextOf(tp)
	if !sc.IsValid() {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, sc)
}

// TraceID is the trace id of the span in ctx (32 hex digits), or "" when
// there is none: the trace_id field of log lines.
func TraceID(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return ""
	}
	return sc.TraceID().String()
}
