package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/store"
)

// Service is everything of converge that runs in the background, built and
// started once by every command that serves (serve, worker, dev, bench):
// the River client (with the run worker when working), the store on it,
// the group commit of the hot transactions, and, when working, the
// reconciler, the promoter of scheduled jobs, the watch of runs in flight
// (runWatch) and the periodic pruning job (PruneWorker, every
// Config.Retention.Interval).
type Service struct {
	cfg        Config
	logger     *slog.Logger
	client     *river.Client[pgx.Tx]
	store      *store.Store
	commit     *GroupCommit
	reconciler *Reconciler
	promoter   *Promoter
	watch      *runWatch
	notify     *NotifyWorker
	started    bool
}

// NewService builds the service on pool. Nothing runs until Start.
func NewService(pool *pgxpool.Pool, cfg Config) (*Service, error) {
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	// The worker needs the store and the group commit, which need the
	// River client, which needs the worker: the worker is registered
	// first and given them before anything can run.
	w := &RunWorker{kinds: cfg.Kinds, leaseTTL: cfg.RescueAfter, logger: logger, metrics: cfg.Metrics, runFinished: cfg.RunFinished}
	cfg.Notify = slices.Clone(cfg.Notify)
	notifyKeysSet(cfg.Notify)
	byKey := make(map[string]*NotifyReceiver, len(cfg.Notify))
	for i := range cfg.Notify {
		byKey[cfg.Notify[i].Key] = &cfg.Notify[i]
	}
	nw := &NotifyWorker{receivers: byKey, dashboard: cfg.DashboardURL, client: notifyClient, metrics: cfg.Metrics,
		logger: logger.With("component", "notify")}
	pw := &PruneWorker{retention: cfg.Retention, logger: logger, metrics: cfg.Metrics}
	client, err := newClient(pool, cfg, logger, w, nw, pw)
	if err != nil {
		return nil, err
	}
	st := store.New(pool, client, cfg.StoreOptions...)
	routes := make([]converge.NotifyRoute, len(cfg.Notify))
	for i, r := range cfg.Notify {
		routes[i] = r.Route()
	}
	st.NotifyRoutesSet(routes)
	nw.store = st
	s := &Service{cfg: cfg, logger: logger, client: client, store: st, commit: NewGroupCommit(st, logger, cfg.Metrics), notify: nw}
	w.store, w.commit = st, s.commit
	pw.store = st
	if cfg.Work {
		queues := make([]string, 0, len(cfg.Kinds))
		for name := range cfg.Kinds {
			queues = append(queues, name)
		}
		for _, r := range cfg.Notify {
			queues = append(queues, converge.NotificationQueue(r.Key))
		}
		slices.Sort(queues)
		queues = slices.Compact(queues)
		// The loops fail each pass while the database is away: an error
		// of theirs is written once per RepeatWindow.
		loops := slog.New(newRepeatLimiter(logger.Handler(), RepeatWindow))
		s.reconciler = NewReconciler(st, ReconcileInterval(cfg.RescueAfter), loops)
		promote := max(cfg.FetchPollInterval, 10*time.Millisecond)
		s.promoter = NewPromoter(st, queues, promote, loops)
		// After a database outage the reconciler makes a quick pass.
		s.promoter.reconcileAfterOutages(s.reconciler, promote)
		s.watch = newRunWatch(st, RunWatchInterval, loops)
		w.watch = s.watch
	}
	return s, nil
}

// Store is the store the service enqueues jobs with.
func (s *Service) Store() *store.Store { return s.store }

// Client is the River client.
func (s *Service) Client() *river.Client[pgx.Tx] { return s.client }

// GroupCommit is the group commit of the hot transactions: API processes
// accept events through it.
func (s *Service) GroupCommit() *GroupCommit { return s.commit }

// Start starts the workers, the reconciler and the promoter (a service that
// does not work starts nothing). They run until Stop, not until ctx ends:
// stopping is Stop's, in order.
func (s *Service) Start(ctx context.Context) error {
	if !s.cfg.Work {
		return nil
	}
	ctx = context.WithoutCancel(ctx)
	if err := s.client.Start(ctx); err != nil {
		return fmt.Errorf("start workers: %w", err)
	}
	// Notifications queued for receivers the configuration no longer
	// has sit in queues no worker takes: they are dropped now.
	s.notify.dropUnrouted(ctx)
	s.reconciler.Start(ctx)
	s.promoter.Start(ctx)
	s.watch.Start(ctx)
	s.started = true
	return nil
}

// Stop shuts the service down: River stops fetching and lets the attempts
// in flight finish for SoftStopTimeout (or until ctx ends, when it is zero), then cancels those left
// (StopAndCancel: an attempt interrupted so is taken back, costing nothing,
// and its job snoozed to run again at once); then the outcomes still being
// recorded in the background are drained, and the reconciler and promoter
// stopped. ctx bounds the wait after the soft stop.
func (s *Service) Stop(ctx context.Context) error {
	var errs []error
	if s.started {
		sctx, cancel := context.WithCancel(ctx)
		if s.cfg.SoftStopTimeout > 0 {
			sctx, cancel = context.WithTimeout(ctx, s.cfg.SoftStopTimeout)
		}
		err := s.client.Stop(sctx)
		cancel()
		if err != nil {
			s.logger.Warn("attempts still in flight at the shutdown timeout; cancelling them (they cost no attempt)")
			hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			if err := s.client.StopAndCancel(hctx); err != nil {
				errs = append(errs, fmt.Errorf("stop workers: %w", err))
			}
			cancel()
		}
	}
	// Successful attempts whose outcome is still being recorded.
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	if err := s.commit.Stop(dctx); err != nil {
		errs = append(errs, err)
	}
	cancel()
	if s.started {
		s.reconciler.Stop()
		s.promoter.Stop()
		s.watch.Stop()
		s.started = false
	}
	return errors.Join(errs...)
}
