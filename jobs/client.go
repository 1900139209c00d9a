package jobs

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/store"
	"github.com/converge-run/converge/target"
	"github.com/converge-run/converge/telemetry"
)

// Kind is the runtime form of one configured kind: its policy (of which
// the workers apply Concurrency, Timeout and Backoff; MaxAttempts is the
// API's, set on a run when it is accepted) and its built target, which is
// not policy.
type Kind struct {
	converge.KindPolicy
	// Target is where the kind's attempts go; it enforces Timeout.
	Target target.Target
}

// Config sets up the jobs service.
type Config struct {
	Kinds map[string]*Kind
	// Work is false for an insert-only client (an api process): no
	// workers, no reconciler, no promoter.
	Work bool
	// RescueAfter is the lease of an attempt in flight: a worker that
	// vanished releases its stream after this long.
	RescueAfter       time.Duration
	FetchCooldown     time.Duration
	FetchPollInterval time.Duration
	PollOnly          bool
	// ListenPool, if set, is where River listens for notifications
	// (LISTEN needs a session of its own, which a pooler in transaction
	// mode cannot give): a pool on database.direct_url. Everything else
	// goes through the main pool.
	ListenPool *pgxpool.Pool
	// StoreOptions configure the store (store.TransactionTimeouts).
	StoreOptions []store.Option
	// SoftStopTimeout is how long a stopping worker lets attempts in
	// flight finish (River's Stop) before it cancels them (StopAndCancel;
	// they then cost no attempt).
	SoftStopTimeout time.Duration
	Logger          *slog.Logger
	// Metrics, if set, counts what the workers and the group commit do:
	// attempts, queue lag, fenced finishes, worker polls and batch
	// fallbacks (register it once per process; see telemetry.NewMetrics).
	Metrics *telemetry.Metrics
	// RunFinished, if set, is called by the worker when an attempt's
	// outcome has been committed and left its run terminal (succeeded or
	// failed), before River records the job as completed (which it does in
	// batches, up to a quarter of a second later).
	RunFinished func(run *converge.Run, status converge.RunStatus)
	// Notify are the receivers of notifications (SPEC §12), by their
	// position in the configuration; DashboardURL is the base URL of the
	// dashboard their links point to.
	Notify       []NotifyReceiver
	DashboardURL string
	// Retention is how long finished work is kept: a working service runs
	// a pruning pass every Retention.Interval (none when 0), and River
	// keeps its finished job rows no longer than Retention.Runs.
	Retention converge.Retention
}

// notifyConcurrency is how many notifications to one receiver a worker
// process sends at once.
const notifyConcurrency = 4

// newClient builds the River client. With cfg.Work it registers w and a
// queue per kind with the kind's concurrency.
func newClient(pool *pgxpool.Pool, cfg Config, logger *slog.Logger, w *RunWorker, nw *NotifyWorker, pw *PruneWorker) (*river.Client[pgx.Tx], error) {
	completed, cancelled, discarded := riverJobRetention(cfg.Retention)
	rc := &river.Config{
		// River's producers log a failed fetch at every poll, per queue:
		// an error is written once per RepeatWindow.
		Logger:      slog.New(newRepeatLimiter(logger.Handler(), RepeatWindow)).With("component", "river"),
		MaxAttempts: converge.RunJobMaxAttempts,
		// Job time limits are per kind (RunWorker.Timeout); River's own
		// rescuer must never take a live attempt away, so it waits past the
		// longest attempt plus the lease. Our reconciler rescues sooner,
		// from the lease.
		JobTimeout:                  -1,
		PollOnly:                    cfg.PollOnly,
		CompletedJobRetentionPeriod: completed,
		CancelledJobRetentionPeriod: cancelled,
		DiscardedJobRetentionPeriod: discarded,
	}
	if cfg.Work {
		longest := time.Duration(0)
		workers := river.NewWorkers()
		if err := river.AddWorkerSafely(workers, w); err != nil {
			return nil, fmt.Errorf("register worker: %w", err)
		}
		if err := river.AddWorkerSafely(workers, pw); err != nil {
			return nil, fmt.Errorf("register prune worker: %w", err)
		}
		rc.Workers = workers
		rc.Queues = map[string]river.QueueConfig{PruneQueue: {MaxWorkers: 1}}
		for name, k := range cfg.Kinds {
			rc.Queues[name] = river.QueueConfig{MaxWorkers: max(k.Concurrency, rc.Queues[name].MaxWorkers)}
			longest = max(longest, k.Timeout)
		}
		if len(cfg.Notify) > 0 {
			if err := river.AddWorkerSafely(workers, nw); err != nil {
				return nil, fmt.Errorf("register notification worker: %w", err)
			}
			for _, r := range cfg.Notify {
				rc.Queues[converge.NotificationQueue(r.Key)] = river.QueueConfig{MaxWorkers: notifyConcurrency}
			}
		}
		if cfg.Retention.Interval > 0 {
			rc.PeriodicJobs = []*river.PeriodicJob{prunePeriodicJob(cfg.Retention)}
		}
		rc.FetchCooldown = cfg.FetchCooldown
		rc.FetchPollInterval = cfg.FetchPollInterval
		rc.RescueStuckJobsAfter = longest + cfg.RescueAfter + time.Minute
		rc.Hooks = []rivertype.Hook{&pollHook{metrics: cfg.Metrics}}
	}
	var driver riverdriver.Driver[pgx.Tx] = riverpgxv5.New(pool)
	if cfg.ListenPool != nil && !cfg.PollOnly {
		driver = &listenDriver{Driver: riverpgxv5.New(pool), listen: riverpgxv5.New(cfg.ListenPool)}
	}
	client, err := river.NewClient(driver, rc)
	if err != nil {
		return nil, fmt.Errorf("river client: %w", err)
	}
	return client, nil
}

// listenDriver is River's pgx driver on one pool whose notifications are
// listened for on another: a pooler in transaction mode in front of the
// first, a direct connection for the second.
type listenDriver struct {
	*riverpgxv5.Driver
	listen *riverpgxv5.Driver
}

// GetListener returns a listener on the listen pool.
func (d *listenDriver) GetListener(params *riverdriver.GetListenenerParams) riverdriver.Listener {
	return d.listen.GetListener(params)
}

// pollHook sets converge_worker_last_poll_timestamp_seconds each time one
// of River's producers has asked the database for work and got an answer
// (River emits JobGetAvailableDurationMetric after a successful fetch
// only, whether it locked jobs or none): an idle worker reports at every
// fetch poll interval, and a worker whose fetches fail (the database
// unreachable or read-only) stops reporting, so that "no worker polling"
// is seen.
type pollHook struct {
	river.HookDefaults
	metrics *telemetry.Metrics
}

// MetricEmit implements rivertype.HookMetricEmit. It does not block.
func (h *pollHook) MetricEmit(_ context.Context, params *rivertype.HookMetricEmitParams) {
	if _, ok := params.Metric.(*rivertype.JobGetAvailableDurationMetric); ok {
		h.metrics.WorkerPolled(time.Now())
	}
}
