package jobs

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/converge-run/converge/store"
)

// ReconcileInterval is how often the reconciler of a process whose leases
// last rescueAfter looks for stranded runs: a quarter of rescueAfter,
// within 100ms..15s.
func ReconcileInterval(rescueAfter time.Duration) time.Duration {
	return min(max(rescueAfter/4, 100*time.Millisecond), 15*time.Second)
}

// Reconciler gives a fresh job to runs whose worker vanished, every
// interval, so that they are picked up again within rescue_after rather than
// when River rescues the lost job (which waits past the longest attempt):
// running runs whose stream lease expired or went to another run, and
// queued or retrying runs whose job has been running in River for four
// intervals (at least a second): the worker died between fetching the job
// and beginning, or between finishing an attempt and River recording the
// snooze. It also records as abandoned the open attempts of finished runs
// whose worker vanished. The store decides, under the locks, whether a run
// is still stranded (store.RunRescue).
type Reconciler struct {
	store      *store.Store
	interval   time.Duration
	stuckAfter time.Duration
	logger     *slog.Logger
	loop       loop
}

// NewReconciler returns a reconciler of st running every interval.
func NewReconciler(st *store.Store, interval time.Duration, logger *slog.Logger) *Reconciler {
	return &Reconciler{store: st, interval: interval, stuckAfter: max(4*interval, time.Second), logger: logger}
}

// Start starts the reconciler in the background until Stop.
func (r *Reconciler) Start(ctx context.Context) {
	r.loop.start(ctx, r.interval, func(ctx context.Context) { r.RunOnce(ctx) })
}

// Stop stops the reconciler and waits for a pass in progress.
func (r *Reconciler) Stop() { r.loop.stop() }

// RunOnce makes one pass and returns how many runs it rescued.
func (r *Reconciler) RunOnce(ctx context.Context) int {
	ids, err := r.store.RunStrandedList(ctx, r.stuckAfter)
	if err != nil {
		if ctx.Err() == nil {
			r.logger.Error("reconcile runs", "error", err)
		}
		return 0
	}
	rescued := 0
	defer func() {
		if rescued > 0 {
			r.logger.Warn("rescued runs whose worker vanished", "runs", rescued)
		}
	}()
	for _, id := range ids {
		ok, err := r.store.RunRescue(ctx, id, r.stuckAfter)
		if err != nil {
			if ctx.Err() == nil {
				r.logger.Error("reconcile runs", "error", err)
			}
			return rescued
		}
		if ok {
			rescued++
		}
	}
	if err := r.store.AttemptAbandonOrphans(ctx); err != nil && ctx.Err() == nil {
		r.logger.Error("reconcile runs", "error", err)
	}
	return rescued
}

// Promoter makes the scheduled run jobs of queues available when their
// time comes (store.JobsPromote), every interval. Worker processes run it
// with the fetch poll interval, so that a scheduled job starts within about
// twice that of its time; River's own scheduler runs every 5 s.
type Promoter struct {
	store    *store.Store
	queues   []string
	interval time.Duration
	logger   *slog.Logger
	loop     loop
}

// NewPromoter returns a promoter of the scheduled jobs of queues.
func NewPromoter(st *store.Store, queues []string, interval time.Duration, logger *slog.Logger) *Promoter {
	return &Promoter{store: st, queues: queues, interval: interval, logger: logger}
}

// Start starts the promoter in the background until Stop.
func (p *Promoter) Start(ctx context.Context) {
	p.loop.start(ctx, p.interval, func(ctx context.Context) {
		if _, err := p.store.JobsPromote(ctx, p.queues); err != nil && ctx.Err() == nil {
			p.logger.Error("promote scheduled jobs", "error", err)
		}
	})
}

// Stop stops the promoter and waits for a pass in progress.
func (p *Promoter) Stop() { p.loop.stop() }

// loop calls a function every interval in a goroutine of its own.
type loop struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func (l *loop) start(ctx context.Context, interval time.Duration, fn func(context.Context)) {
	ctx, l.cancel = context.WithCancel(ctx)
	l.wg.Go(func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			fn(ctx)
		}
	})
}

func (l *loop) stop() {
	if l.cancel != nil {
		l.cancel()
	}
	l.wg.Wait()
}
