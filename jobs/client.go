package jobs

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/store"
	"github.com/converge-run/converge/target"
)

// Kind is the runtime form of one configured kind.
type Kind struct {
	Name        string
	Target      target.Target
	Timeout     time.Duration // one attempt's limit, enforced by the target
	MaxAttempts int
	Backoff     converge.Backoff
	Concurrency int
}

// Config sets up a River client.
type Config struct {
	Kinds map[string]*Kind
	// Work is false for an insert-only client (an api process).
	Work bool
	// RescueAfter is the lease of an attempt in flight: a worker that
	// vanished releases its stream after this long.
	RescueAfter       time.Duration
	FetchCooldown     time.Duration
	FetchPollInterval time.Duration
	PollOnly          bool
	// SoftStopTimeout is how long a stopping worker lets attempts in
	// flight finish before it cancels them (they then cost no attempt).
	SoftStopTimeout time.Duration
	Logger          *slog.Logger
	Metrics         *Metrics
	// RunFinished, if set, is called by the worker when an attempt's
	// outcome has been committed and left its run terminal (succeeded or
	// failed), before River records the job as completed (which it does in
	// batches, up to a quarter of a second later).
	RunFinished func(run *converge.Run, status converge.RunStatus)
}

// NewClient builds the River client and hands it to st. With cfg.Work it
// registers the run worker and a queue per kind with the kind's concurrency.
func NewClient(pool *pgxpool.Pool, st *store.Store, cfg Config) (*river.Client[pgx.Tx], error) {
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	rc := &river.Config{
		Logger:      logger.With("component", "river"),
		MaxAttempts: 100_000,
		// Job time limits are per kind (RunWorker.Timeout); River's own
		// rescuer must never take a live attempt away, so it waits past the
		// longest attempt plus the lease. Our reconciler rescues sooner,
		// from the lease.
		JobTimeout:                  -1,
		PollOnly:                    cfg.PollOnly,
		CompletedJobRetentionPeriod: time.Hour,
		CancelledJobRetentionPeriod: time.Hour,
		DiscardedJobRetentionPeriod: 7 * 24 * time.Hour,
	}
	if cfg.Work {
		longest := time.Duration(0)
		workers := river.NewWorkers()
		w := &RunWorker{store: st, kinds: cfg.Kinds, leaseTTL: cfg.RescueAfter, logger: logger, metrics: cfg.Metrics, runFinished: cfg.RunFinished}
		if err := river.AddWorkerSafely(workers, w); err != nil {
			return nil, fmt.Errorf("register worker: %w", err)
		}
		rc.Workers = workers
		rc.Queues = map[string]river.QueueConfig{}
		for name, k := range cfg.Kinds {
			rc.Queues[name] = river.QueueConfig{MaxWorkers: k.Concurrency}
			longest = max(longest, k.Timeout)
		}
		rc.FetchCooldown = cfg.FetchCooldown
		rc.FetchPollInterval = cfg.FetchPollInterval
		rc.RescueStuckJobsAfter = longest + cfg.RescueAfter + time.Minute
	}
	client, err := river.NewClient(riverpgxv5.New(pool), rc)
	if err != nil {
		return nil, fmt.Errorf("river client: %w", err)
	}
	st.SetRiver(client)
	return client, nil
}

// Reconcile runs st.RunReconcile every interval until ctx ends. Callers
// pass a quarter of rescue_after (within 100ms..15s); a job of a waiting
// run that has been running in River for four intervals (at least a
// second) is taken as lost with its worker.
func Reconcile(ctx context.Context, st *store.Store, interval time.Duration, logger *slog.Logger) {
	params := store.RunReconcileParams{StuckAfter: max(4*interval, time.Second)}
	every(ctx, interval, func() {
		n, err := st.RunReconcile(ctx, params)
		if err != nil && ctx.Err() == nil {
			logger.Error("reconcile runs", "error", err)
		}
		if n > 0 {
			logger.Warn("rescued runs whose worker vanished", "runs", n)
		}
	})
}

// PromoteScheduled makes the scheduled run jobs of queues available when
// their time comes (store.JobsPromote), every interval, until ctx ends.
// Worker processes run it with the fetch poll interval, so that a
// scheduled job starts within about twice that of its time.
func PromoteScheduled(ctx context.Context, st *store.Store, queues []string, interval time.Duration, logger *slog.Logger) {
	every(ctx, interval, func() {
		if _, err := st.JobsPromote(ctx, queues); err != nil && ctx.Err() == nil {
			logger.Error("promote scheduled jobs", "error", err)
		}
	})
}

// every calls fn every interval until ctx ends.
func every(ctx context.Context, interval time.Duration, fn func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		fn()
	}
}
