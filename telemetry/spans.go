package telemetry

import (
	"context"
	"errors"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/converge-run/converge"
)

// The spans of SPEC §14: the accept of an event (and the start of a
// workflow run, and a redrive), each run keeping the context it was created
// under, and one span per attempt, a child of that context whichever
// process runs it and however much later. The target call is a client
// span under the attempt's, whose traceparent the target gets: an HTTP
// target's "converge.http" (with the HTTP attributes; header traceparent),
// an exec target's "converge.exec" (TRACEPARENT).

// tracingOn is set by StartTracing: while it is false every Start* below
// returns ctx unchanged and a no-op span, without allocating.
var tracingOn atomic.Bool

// Span attribute keys of converge's spans.
const (
	AttrKind          = attribute.Key("converge.kind")
	AttrResource      = attribute.Key("converge.resource")
	AttrVersion       = attribute.Key("converge.version")
	AttrEventID       = attribute.Key("converge.event_id")
	AttrRunID         = attribute.Key("converge.run_id")
	AttrRunNumber     = attribute.Key("converge.run_number")
	AttrAttempt       = attribute.Key("converge.attempt")
	AttrOutcome       = attribute.Key("converge.outcome")
	AttrStatus        = attribute.Key("converge.status")
	AttrReplay        = attribute.Key("converge.replay")
	AttrWorkflow      = attribute.Key("converge.workflow")
	AttrWorkflowRunID = attribute.Key("converge.workflow_run_id")
	AttrDeadLetterID  = attribute.Key("converge.dead_letter_id")
)

// noSpan is what the Start functions return while tracing is off.
var noSpan = trace.SpanFromContext(context.Background())

// StartAccept starts the span of accepting an event of kind, resource and
// version: a child of the request's span (itself a child of the
// traceparent the request sent). Its TraceParent is what the event's run
// keeps (store.EventAcceptParams.TraceParent).
func StartAccept(ctx context.Context, kind, resource string, version int64) (context.Context, trace.Span) {
	if !tracingOn.Load() {
		return ctx, noSpan
	}
	return Tracer().Start(ctx, "converge.accept", trace.WithAttributes(
		AttrKind.String(kind), AttrResource.String(resource), AttrVersion.Int64(version)))
}

// Span start options that are the same for every span of their kind.
var (
	// An attempt is converge's own work around the target call, which is
	// a client span of its own under it (target.HTTP, target.Exec).
	attemptKind = trace.WithSpanKind(trace.SpanKindInternal)
	newRoot     = trace.WithNewRoot()
)

// EndAccept ends an accept's span with what was answered.
func EndAccept(span trace.Span, res *converge.EventAcceptResult, err error) {
	if !span.IsRecording() {
		return
	}
	if res != nil {
		// One call: each takes the span's lock.
		if res.Run != nil {
			span.SetAttributes(AttrEventID.String(res.Event.ID.String()), AttrReplay.Bool(res.Replay), AttrRunID.String(res.Run.ID.String()))
		} else {
			span.SetAttributes(AttrEventID.String(res.Event.ID.String()), AttrReplay.Bool(res.Replay))
		}
	}
	endSpan(span, err)
}

// StartWorkflowRunStart starts the span of starting a workflow run; every
// step's run keeps its context, so one workflow run is one trace.
func StartWorkflowRunStart(ctx context.Context, workflow, resource string, version int64) (context.Context, trace.Span) {
	if !tracingOn.Load() {
		return ctx, noSpan
	}
	return Tracer().Start(ctx, "converge.workflow_run.start", trace.WithAttributes(
		AttrWorkflow.String(workflow), AttrResource.String(resource), AttrVersion.Int64(version)))
}

// EndWorkflowRunStart ends a workflow run start's span.
func EndWorkflowRunStart(span trace.Span, w *converge.WorkflowRun, replay bool, err error) {
	if !span.IsRecording() {
		return
	}
	if w != nil {
		span.SetAttributes(AttrWorkflowRunID.String(w.ID.String()), AttrReplay.Bool(replay))
	}
	endSpan(span, err)
}

// AttrSource is the event source of a delivery's span.
const AttrSource = attribute.Key("converge.source")

// StartDelivery starts the span of a delivery posted to event source
// source: the events and workflow runs its rules start keep its context.
func StartDelivery(ctx context.Context, source string) (context.Context, trace.Span) {
	if !tracingOn.Load() {
		return ctx, noSpan
	}
	return Tracer().Start(ctx, "converge.delivery", trace.WithAttributes(AttrSource.String(source)))
}

// EndDelivery ends a delivery's span with what became of it.
func EndDelivery(span trace.Span, res *converge.DeliveryResult, err error) {
	if !span.IsRecording() {
		return
	}
	if res != nil && res.Delivery != nil {
		span.SetAttributes(AttrStatus.String(string(res.Delivery.Status)), AttrReplay.Bool(res.Replay))
	}
	endSpan(span, err)
}

// StartRedrive starts the span of an operator's redrive (of one dead letter
// when id is not empty, of a selection otherwise): the new runs keep its
// context.
func StartRedrive(ctx context.Context, id string) (context.Context, trace.Span) {
	if !tracingOn.Load() {
		return ctx, noSpan
	}
	var opts []trace.SpanStartOption
	if id != "" {
		opts = append(opts, trace.WithAttributes(AttrDeadLetterID.String(id)))
	}
	return Tracer().Start(ctx, "converge.redrive", opts...)
}

// EndRedrive ends a redrive's span; run, the new run of a single redrive,
// adds a link to the trace of the run that failed (its accept's).
func EndRedrive(span trace.Span, run *converge.Run, err error) {
	if !span.IsRecording() {
		return
	}
	if run != nil {
		span.SetAttributes(AttrRunID.String(run.ID.String()), AttrRunNumber.Int(run.Number))
		if sc := SpanContextOf(run.TraceLink); sc.IsValid() {
			span.AddLink(trace.Link{SpanContext: sc})
		}
	}
	endSpan(span, err)
}

// StartAttempt starts the span of attempt number attempt of run: a child of
// the context the run was created under (run.TraceParent), so that it joins
// the trace of the run's accept in any process, linked to run.TraceLink
// for a redriven run. A run without a stored context (created while
// tracing was off) starts a trace of its own.
func StartAttempt(ctx context.Context, run *converge.Run, attempt int) (context.Context, trace.Span) {
	if !tracingOn.Load() {
		return ctx, noSpan
	}
	var opts [3]trace.SpanStartOption // on the stack: no slice to grow
	opts[0] = attemptKind
	n := 1
	if sc := SpanContextOf(run.TraceLink); sc.IsValid() {
		opts[n] = trace.WithLinks(trace.Link{SpanContext: sc})
		n++
	}
	parent := ContextWithTraceParent(ctx, run.TraceParent)
	if run.TraceParent == "" {
		// A root of its own, not a child of whatever ctx carries.
		opts[n] = newRoot
		n++
	}
	ctx, span := Tracer().Start(parent, "converge.attempt", opts[:n]...)
	// The attributes are built only for a span that records: one not
	// sampled (a run whose accept was not) costs no formatting.
	if span.IsRecording() {
		span.SetAttributes(AttrKind.String(run.Kind), AttrResource.String(run.Resource), AttrVersion.Int64(run.Version),
			AttrEventID.String(run.EventID.String()), AttrRunID.String(run.ID.String()),
			AttrRunNumber.Int(run.Number), AttrAttempt.Int(attempt))
	}
	return ctx, span
}

// EndAttempt ends an attempt's span with the outcome recorded and the
// run's status after it (both may be empty when the outcome's record is
// still to come), and the call's error.
func EndAttempt(span trace.Span, outcome converge.AttemptOutcome, status converge.RunStatus, callErr error) {
	if !span.IsRecording() {
		return
	}
	// One call: each takes the span's lock.
	switch {
	case outcome != "" && status != "":
		span.SetAttributes(AttrOutcome.String(string(outcome)), AttrStatus.String(string(status)))
	case outcome != "":
		span.SetAttributes(AttrOutcome.String(string(outcome)))
	case status != "":
		span.SetAttributes(AttrStatus.String(string(status)))
	}
	endSpan(span, callErr)
}

// endSpan records err (if any) on span and ends it.
func endSpan(span trace.Span, err error) {
	if err != nil {
		var appErr *converge.AppError
		msg := err.Error()
		if errors.As(err, &appErr) {
			msg = string(appErr.Code) + ": " + appErr.Message
		}
		span.SetStatus(codes.Error, msg)
	}
	span.End()
}
