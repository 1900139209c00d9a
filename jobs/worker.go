package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/riverqueue/river"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/store"
	"github.com/converge-run/converge/target"
	"github.com/converge-run/converge/telemetry"
)

// RunWorker drives one attempt of a run per job execution: begin (checks
// and lease), call, finish. Backoff and waiting for the lease are River
// snoozes, which cost no attempt.
type RunWorker struct {
	river.WorkerDefaults[converge.RunArgs]
	store       *store.Store
	commit      *GroupCommit
	kinds       map[string]*Kind
	leaseTTL    time.Duration
	logger      *slog.Logger
	metrics     *telemetry.Metrics
	runFinished func(*converge.Run, converge.RunStatus)
	// watch stops the calls of runs that ended meanwhile (runWatch).
	watch *runWatch
}

// errLeaseLost cancels a call whose heartbeat found the run finished or the
// lease gone.
var errLeaseLost = errors.New("run superseded, cancelled or lease lost")

// errLeaseUnrenewed cancels a call whose lease could not be renewed in time
// (the database was unreachable or too slow): the lease may be about to
// expire, and another worker to take the stream over.
var errLeaseUnrenewed = errors.New("the stream's lease could not be renewed in time; the call was stopped so that no other attempt of the stream overlaps it")

// Timeout is the River time limit of one job: the longest attempt of its
// kind plus room to record it.
func (w *RunWorker) Timeout(job *river.Job[converge.RunArgs]) time.Duration {
	if k, ok := w.kinds[job.Queue]; ok {
		// The outcome's write may be retried for up to rescue_after
		// (GroupCommit.AttemptFinishRetry).
		return k.Timeout + w.leaseTTL + 30*time.Second
	}
	return -1
}

// Work implements river.Worker.
func (w *RunWorker) Work(ctx context.Context, job *river.Job[converge.RunArgs]) error {
	w.metrics.WorkerPolled(time.Now())
	ticket, err := w.commit.AttemptBegin(ctx, job.Args.RunID, job.ID, w.leaseTTL)
	if err != nil {
		return err
	}
	switch ticket.Decision {
	case converge.DecisionDone:
		return nil
	case converge.DecisionWait:
		return river.JobSnooze(ticket.Wait)
	}
	run := ticket.Run
	kind, ok := w.kinds[run.Kind]
	if !ok {
		return fmt.Errorf("run %s: kind %q is not configured in this process", run.ID, run.Kind)
	}
	// The attempt's span joins the trace the run was created under
	// (run.TraceParent), whichever process runs it; the target call is a
	// client span under it, whose traceparent the target gets.
	ctx, span := telemetry.StartAttempt(ctx, run, ticket.Attempt)
	log := &attemptLog{base: w.logger, run: run, attempt: ticket.Attempt}
	if id := telemetry.TraceID(ctx); id != "" {
		log.traceID = id
	} else if run.TraceID != nil {
		log.traceID = *run.TraceID
	}
	log.Debug("attempt started")

	callCtx, cancel := context.WithCancelCause(ctx)
	if w.watch != nil {
		defer w.watch.add(run.ID, cancel)()
	}
	hb := w.startHeartbeat(callCtx, cancel, run, ticket.Attempt, ticket.LeaseFrom, log)
	started := time.Now()
	// The job's scheduled_at is when the run last became runnable: its
	// insert (or the end of its debounce), the end of a retry's backoff or
	// of a wait for the stream's lease (each a snooze), or its wake-up
	// when the lease was released (JobRetryTx sets it to now()). The run's
	// created_at or next_attempt_at would count the wait for another run
	// of the stream, which is no worker's lag.
	w.metrics.QueueLag(run.Kind, started.Sub(job.ScheduledAt))
	res, callErr := kind.Target.Call(callCtx, target.Request{
		EventID: run.EventID, RunID: run.ID, Attempt: ticket.Attempt,
		Kind: run.Kind, Resource: run.Resource, Version: run.Version, Payload: ticket.Payload,
	})
	elapsed := time.Since(started)
	cause := context.Cause(callCtx)
	leaseLost := errors.Is(cause, errLeaseLost) || errors.Is(cause, errLeaseUnrenewed)
	cancel(nil)
	hb.stop()

	p := store.AttemptFinishParams{Run: run, JobID: job.ID, Attempt: ticket.Attempt, Started: started, Backoff: kind.Backoff}
	if callErr == nil {
		// Success ends the job whatever the outcome's record finds (the run
		// succeeded, or was superseded meanwhile): record it in the
		// background and free this slot (GroupCommit.AttemptFinishLater).
		p.Output = res.Output
		telemetry.EndAttempt(span, converge.OutcomeSucceeded, "", nil)
		w.commit.AttemptFinishLater(p, time.Now().Add(w.leaseTTL), func(fin *store.AttemptFinishResult, err error) {
			if err != nil {
				log.Error("record attempt outcome: gave up after rescue_after; the run is left to the rescuer, which calls the target again", "error", err)
				return
			}
			w.finished(run, fin, p.Err, elapsed, log)
		})
		return nil
	}
	e, retryAfter := converge.ClassifyError(callErr)
	if capped, cut := kind.Backoff.RetryAfterCap(retryAfter); cut {
		// SPEC §6: a longer Retry-After is cut, and the attempt's error
		// says so.
		said := retryAfter.String()
		if retryAfter == math.MaxInt64 { // target.ParseRetryAfter's "more than a duration holds"
			said = "over 292 years"
		}
		e.Message += fmt.Sprintf(" (Retry-After of %s cut to backoff.max_retry_after, %s)", said, capped)
		retryAfter = capped
	}
	// Stopped by our own process (shutdown), not by the target, a
	// supersession, a lost lease, or River cancelling the job because
	// the reconciler gave the run to another job: only then is the
	// attempt taken back. An attempt that reached the target is never
	// erased otherwise (its number would be sent again).
	stopCause := context.Cause(ctx)
	remote := errors.Is(stopCause, river.ErrJobCancelledRemotely)
	if remote && ctx.Err() != nil {
		// River cancelled the job: the transport's and River's words
		// ("context canceled: JobCancelError") say less than this.
		e.Message = "the call was cancelled: its run was superseded or cancelled, or given to another job, while the call was in flight"
	}
	p.Err, p.RetryAfter = &e, retryAfter
	p.Interrupted = ctx.Err() != nil && !leaseLost && !remote && !errors.Is(stopCause, context.DeadlineExceeded)
	// Stopped because the lease is (or may be) gone: the worker gave the
	// attempt up, as a vanished one would have. (A superseded or
	// cancelled run records it cancelled instead.)
	p.Abandoned = leaseLost || remote && ctx.Err() != nil
	fin, err := w.commit.AttemptFinishRetry(context.WithoutCancel(ctx), p, time.Now().Add(w.leaseTTL))
	if err != nil {
		log.Error("record attempt outcome: gave up after rescue_after; the run is left to the rescuer", "error", err)
		telemetry.EndAttempt(span, "", "", callErr)
		return err
	}
	telemetry.EndAttempt(span, fin.Outcome, fin.Status, callErr)
	if fin.Requeue {
		log.Info("attempt interrupted by shutdown; taken back and requeued", "duration_ms", elapsed.Milliseconds())
		return river.JobSnooze(0)
	}
	w.finished(run, fin, p.Err, elapsed, log)
	if fin.Status == converge.RunRetrying {
		return river.JobSnooze(fin.RetryIn)
	}
	return nil
}

// finished reports a recorded attempt: metrics, the log, and the
// RunFinished hook when the run is terminal.
func (w *RunWorker) finished(run *converge.Run, fin *store.AttemptFinishResult, callErr *converge.Error, elapsed time.Duration, log *attemptLog) {
	if fin.Outcome != "" {
		w.metrics.AttemptFinished(run.Kind, fin.Outcome, elapsed)
	}
	switch {
	case fin.Fenced:
		// Late: the attempt was closed already, or its run had ended.
		w.metrics.AttemptFenced(run.Kind)
		log.Info("late attempt outcome refused", "status", fin.Status, "recorded_outcome", fin.Outcome, "duration_ms", elapsed.Milliseconds())
	case callErr != nil:
		log.Info("attempt failed", "status", fin.Status, "error_class", callErr.Class, "error", callErr.Message, "duration_ms", elapsed.Milliseconds())
	case log.enabled(slog.LevelInfo):
		// Checked first: the arguments of a line not written cost
		// allocations on every attempt.
		log.Info("attempt succeeded", "status", fin.Status, "duration_ms", elapsed.Milliseconds())
	}
	if fin.Status == converge.RunFailed && !fin.Fenced && callErr != nil {
		log.Warn("run failed; dead letter opened", "error_class", callErr.Class, "error", callErr.Message)
	}
	if w.runFinished != nil && fin.Status.Terminal() {
		w.runFinished(run, fin.Status)
	}
}

// heartbeat renews the lease every quarter of its length and cancels the
// call as soon as the run is finished elsewhere or the lease is lost.
//
// It also fences the call (G3): the lease lasts at least leaseTTL from
// leaseFrom, and from the from of each renewal that succeeds (moments of
// this process's monotonic clock no later than the database's now() that
// set the expiry). If no renewal succeeds for three quarters of that, the
// call is cancelled without asking the database, so that it has ended
// before the lease can run out and the reconciler of another worker rescue
// the run. The remaining quarter covers the cancellation reaching the
// target and clock rate differences. A worker cut off from the database,
// or starved of connections, thus never keeps calling past its lease; one
// whose whole process is paused for longer than that quarter can (see
// docs/architecture.md).
//
// It runs on two timers, the renewal's and the fence's, rather than in a
// goroutine of its own: most calls end long before the first renewal is
// due, and then no goroutine is started at all.
type heartbeat struct {
	w       *RunWorker
	ctx     context.Context
	cancel  context.CancelCauseFunc
	run     *converge.Run
	attempt int
	log     *attemptLog
	every   time.Duration
	safe    time.Duration

	mu      sync.Mutex
	stopped bool
	next    time.Time // when the renewal timer is due
	tick    *time.Timer
	fence   *time.Timer
	active  sync.WaitGroup // timer functions running
}

// startHeartbeat starts the heartbeat of an attempt whose call runs on ctx
// (cancelled with cancel) and whose lease was taken at leaseFrom.
func (w *RunWorker) startHeartbeat(ctx context.Context, cancel context.CancelCauseFunc, run *converge.Run, attempt int, leaseFrom time.Time, log *attemptLog) *heartbeat {
	h := &heartbeat{
		w: w, ctx: ctx, cancel: cancel, run: run, attempt: attempt, log: log,
		every: min(max(w.leaseTTL/4, 50*time.Millisecond), 5*time.Second),
		safe:  w.leaseTTL - w.leaseTTL/4,
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.fence = time.AfterFunc(time.Until(leaseFrom.Add(h.safe)), h.fenced)
	h.next = time.Now().Add(h.every)
	h.tick = time.AfterFunc(h.every, h.beat)
	return h
}

// enter reports whether the heartbeat still runs, and if so counts a timer
// function in until its leave.
func (h *heartbeat) enter() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped {
		return false
	}
	h.active.Add(1)
	return true
}

// fenced stops the call: no renewal succeeded in time.
func (h *heartbeat) fenced() {
	if !h.enter() {
		return
	}
	defer h.active.Done()
	h.cancel(errLeaseUnrenewed)
	if errors.Is(context.Cause(h.ctx), errLeaseUnrenewed) {
		h.log.Warn("lease not renewed in time; call stopped", "lease_ttl", h.w.leaseTTL)
	}
}

// beat renews the lease once and sets the next renewal, every h.every from
// the first (a renewal that took longer than that is followed by the next
// at once, as a ticker's would be).
func (h *heartbeat) beat() {
	if !h.enter() {
		return
	}
	defer h.active.Done()
	if h.ctx.Err() != nil {
		return
	}
	hctx, hcancel := context.WithTimeout(h.ctx, h.w.leaseTTL/2)
	alive, from, err := h.w.store.AttemptHeartbeat(hctx, h.run, h.attempt, h.w.leaseTTL)
	hcancel()
	switch {
	case err != nil:
		if h.ctx.Err() == nil {
			h.log.Warn("renew lease", "error", err)
		}
	case !alive:
		h.cancel(errLeaseLost)
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped || h.ctx.Err() != nil {
		return
	}
	if err == nil {
		h.fence.Reset(time.Until(from.Add(h.safe)))
	}
	now := time.Now()
	h.next = h.next.Add(h.every)
	if h.next.Before(now) {
		// Missed ticks are dropped, one is due now.
		for !h.next.Add(h.every).After(now) {
			h.next = h.next.Add(h.every)
		}
	}
	h.tick.Reset(max(h.next.Sub(now), 0))
}

// stop ends the heartbeat once its call has returned (and its context was
// cancelled), and waits for a renewal in progress.
func (h *heartbeat) stop() {
	h.mu.Lock()
	h.stopped = true
	h.tick.Stop()
	h.fence.Stop()
	h.mu.Unlock()
	h.active.Wait()
}
