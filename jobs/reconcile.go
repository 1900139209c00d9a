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
//
// After a database outage, which the Promoter sees end (outageWatch), it
// makes one quick pass at once (RunOnceAfterOutage), in which the jobs
// attempted before the outage count as stuck too.
type Reconciler struct {
	store      *store.Store
	interval   time.Duration
	stuckAfter time.Duration
	logger     *slog.Logger
	loop       loop

	// compactedAt is when the loop last compacted the run counts
	// (compactRunCounts).
	compactedAt time.Time

	mu sync.Mutex
	// pending is the outage whose quick pass is still to be made.
	pending *outage
	// wake tells the loop that pending is set.
	wake chan struct{}
}

// NewReconciler returns a reconciler of st running every interval.
func NewReconciler(st *store.Store, interval time.Duration, logger *slog.Logger) *Reconciler {
	return &Reconciler{store: st, interval: interval, stuckAfter: max(4*interval, time.Second), logger: logger,
		wake: make(chan struct{}, 1)}
}

// Start starts the reconciler in the background until Stop.
func (r *Reconciler) Start(ctx context.Context) {
	r.loop.wake = r.wake
	r.loop.start(ctx, r.interval, func(ctx context.Context) {
		r.mu.Lock()
		o := r.pending
		r.pending = nil
		r.mu.Unlock()
		defer r.compactRunCounts(ctx)
		if o == nil {
			r.RunOnce(ctx)
			return
		}
		// The quick pass is also a full periodic one.
		rescued, err := r.RunOnceAfterOutage(ctx, o.before())
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			// Made again at the next tick, unless another outage
			// has ended meanwhile.
			r.mu.Lock()
			if r.pending == nil {
				r.pending = o
			}
			r.mu.Unlock()
		}
		level := slog.LevelInfo
		if rescued > 0 {
			level = slog.LevelWarn
		}
		r.logger.Log(ctx, level, "reconciled runs after a database outage", "rescued", rescued,
			"outage_ms", o.length.Milliseconds(), "complete", err == nil)
	})
}

// RunCountsCompactInterval is how often the reconciler's loop compacts
// the run counts (store.RunCountsCompact): each statement that ends runs
// inserts a row there, which the scrape sums until they are folded.
const RunCountsCompactInterval = 30 * time.Second

// compactRunCounts compacts the run counts if the last compaction of this
// loop is RunCountsCompactInterval old (the first pass compacts at once).
// The worker processes all run it; the store lets one at a time compact,
// and the others skip. A failure is logged and tried again at the next
// interval: the counts stay exact, only their rows are more.
func (r *Reconciler) compactRunCounts(ctx context.Context) {
	if ctx.Err() != nil || (!r.compactedAt.IsZero() && time.Since(r.compactedAt) < RunCountsCompactInterval) {
		return
	}
	r.compactedAt = time.Now()
	if _, err := r.store.RunCountsCompact(ctx); err != nil && ctx.Err() == nil {
		r.logger.Warn("compact the run counts", "error", err)
	}
}

// outageEnded asks the loop for a quick pass after o, at once. One asked
// for while another is still pending replaces it: its outage began later,
// and the jobs attempted before it include those attempted before the
// first.
func (r *Reconciler) outageEnded(o outage) {
	r.mu.Lock()
	r.pending = &o
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Stop stops the reconciler and waits for a pass in progress.
func (r *Reconciler) Stop() { r.loop.stop() }

// RunOnce makes one pass and returns how many runs it rescued.
func (r *Reconciler) RunOnce(ctx context.Context) int {
	rescued, _, _ := r.pass(ctx, func() time.Duration { return r.stuckAfter })
	if rescued > 0 {
		r.logger.Warn("rescued runs whose worker vanished", "runs", rescued)
	}
	return rescued
}

// RunOnceAfterOutage makes one pass in which a queued or retrying run's
// job that River has running counts as stuck when it was attempted before
// the moment before (of this process's clock), as well as when it has
// been running for four intervals. It returns how many runs it rescued,
// and the error (logged) that cut the pass short, if any; the loop makes
// a quick pass that failed again at its next tick.
//
// The moment is given to the store as an age on the database's clock,
// time.Since(before) at each call, so that the clocks of the process and
// of the database need not agree: only the process's monotonic clock is
// read. The store re-checks each run under its locks as it always does
// (store.RunRescue), so a job whose worker was only slow loses nothing:
// its begin is refused, since the run's job is another.
//
// A pass lists at most store.RunStrandedListMax runs; the quick pass makes
// more while a full list rescued some, so that a crash that strands more
// runs than that does not leave the rest to the periodic pass.
func (r *Reconciler) RunOnceAfterOutage(ctx context.Context, before time.Time) (int, error) {
	total := 0
	for {
		rescued, listed, err := r.pass(ctx, func() time.Duration { return min(r.stuckAfter, max(time.Since(before), 0)) })
		total += rescued
		if err != nil || listed < store.RunStrandedListMax || rescued == 0 {
			return total, err
		}
	}
}

// pass makes one pass in which a job running for longer than stuckAfter()
// (read at each call of the store) is stuck. It returns how many runs it
// rescued, how many the store listed, and the first error (logged).
func (r *Reconciler) pass(ctx context.Context, stuckAfter func() time.Duration) (rescued, listed int, err error) {
	fail := func(err error) error {
		if ctx.Err() == nil {
			r.logger.Error("reconcile runs", "error", err)
		}
		return err
	}
	ids, err := r.store.RunStrandedList(ctx, stuckAfter())
	if err != nil {
		return 0, 0, fail(err)
	}
	for _, id := range ids {
		ok, err := r.store.RunRescue(ctx, id, stuckAfter())
		if err != nil {
			return rescued, len(ids), fail(err)
		}
		if ok {
			rescued++
		}
	}
	if err := r.store.AttemptAbandonOrphans(ctx); err != nil {
		return rescued, len(ids), fail(err)
	}
	return rescued, len(ids), nil
}

// Promoter makes the scheduled run jobs of queues available when their
// time comes (store.JobsPromote), every interval. Worker processes run it
// with the fetch poll interval, so that a scheduled job starts within about
// twice that of its time; River's own scheduler runs every 5 s.
//
// Its passes also feed its outageWatch, which asks the reconciler for a
// quick pass when the database comes back after an outage.
type Promoter struct {
	store    *store.Store
	queues   []string
	interval time.Duration
	logger   *slog.Logger
	loop     loop
	outages  outageWatch
}

// NewPromoter returns a promoter of the scheduled jobs of queues.
func NewPromoter(st *store.Store, queues []string, interval time.Duration, logger *slog.Logger) *Promoter {
	return &Promoter{store: st, queues: queues, interval: interval, logger: logger}
}

// Start starts the promoter in the background until Stop.
func (p *Promoter) Start(ctx context.Context) {
	p.loop.start(ctx, p.interval, func(ctx context.Context) {
		_, err := p.store.JobsPromote(ctx, p.queues)
		if ctx.Err() != nil {
			return
		}
		p.outages.observe(time.Now(), err)
		if err != nil {
			p.logger.Error("promote scheduled jobs", "error", err)
		}
	})
}

// reconcileAfterOutages makes the promoter ask r for a quick pass
// (Reconciler.RunOnceAfterOutage) each time the database comes back after
// an outage, in which the jobs attempted before the outage began, less
// margin, count as stuck. Called before Start.
func (p *Promoter) reconcileAfterOutages(r *Reconciler, margin time.Duration) {
	p.outages.ended = func(o outage) {
		o.margin = margin
		r.outageEnded(o)
	}
}

// Stop stops the promoter and waits for a pass in progress.
func (p *Promoter) Stop() { p.loop.stop() }

// loop calls a function every interval in a goroutine of its own, and
// each time wake, when set, receives.
type loop struct {
	wake   <-chan struct{}
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
			case <-l.wake:
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
