package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/config"
	"github.com/converge-run/converge/jobs"
	"github.com/converge-run/converge/store"
	"github.com/converge-run/converge/target"
)

// benchKind is the kind every converge benchmark submits.
const benchKind = "bench"

// instance is converge wired as `converge serve` wires it: a pool, the
// store, the River client with the run worker (when working) and the
// reconciler.
type instance struct {
	pool   *pgxpool.Pool
	store  *store.Store
	client *river.Client[pgx.Tx]
	work   bool
	stopRC context.CancelFunc
	rcDone chan struct{}
	// finished hears of every run the workers finish (jobs.Config's
	// RunFinished) once set.
	finished atomic.Pointer[func(runID uuid.UUID)]
}

// startInstance wires converge on the scratch database. With t it works
// jobs of benchKind against t (MaxWorkers o.Workers); without, it is an
// insert-only API process.
func startInstance(ctx context.Context, s *scratch, o Options, t target.Target) (*instance, error) {
	pool, err := s.pool(ctx, o.PoolSize)
	if err != nil {
		return nil, err
	}
	st := store.New(pool)
	work := t != nil
	kind := &jobs.Kind{
		Name: benchKind, Target: t, Timeout: 30 * time.Second, MaxAttempts: config.DefaultMaxAttempts,
		Concurrency: o.Workers,
	}
	kind.Backoff.Initial, kind.Backoff.Max = config.DefaultBackoffInitial, config.DefaultBackoffMax
	in := &instance{pool: pool, store: st, work: work}
	client, err := jobs.NewClient(pool, st, jobs.Config{
		Kinds: map[string]*jobs.Kind{benchKind: kind}, Work: work,
		RescueAfter: config.DefaultRescueAfter, FetchCooldown: o.FetchCooldown, FetchPollInterval: o.FetchPollInterval,
		SoftStopTimeout: 10 * time.Second, Logger: o.Logger, Metrics: jobs.NewMetrics(prometheus.NewRegistry()),
		RunFinished: func(run *converge.Run, _ converge.RunStatus) {
			if fn := in.finished.Load(); fn != nil {
				(*fn)(run.ID)
			}
		},
	})
	if err != nil {
		pool.Close()
		return nil, err
	}
	in.client = client
	if work {
		if err := client.Start(ctx); err != nil {
			pool.Close()
			return nil, fmt.Errorf("start workers: %w", err)
		}
		rcCtx, cancel := context.WithCancel(ctx)
		in.stopRC, in.rcDone = cancel, make(chan struct{})
		go func() {
			defer close(in.rcDone)
			var wg sync.WaitGroup
			wg.Go(func() { jobs.PromoteScheduled(rcCtx, st, []string{benchKind}, o.FetchPollInterval, o.Logger) })
			jobs.Reconcile(rcCtx, st, min(max(config.DefaultRescueAfter/4, 100*time.Millisecond), 15*time.Second), o.Logger)
			wg.Wait()
		}()
	}
	return in, nil
}

// stop shuts the instance down as serve does: River, then the pool.
func (in *instance) stop(ctx context.Context) {
	if in.work {
		in.stopRC()
		<-in.rcDone
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		if err := in.client.Stop(sctx); err != nil {
			_ = in.client.StopAndCancel(sctx)
		}
		_ = in.store.Drain(sctx)
		cancel()
	}
	in.pool.Close()
}

// completions calls fn with the id of every run the workers finish, as
// soon as its outcome is committed, until the returned stop is called.
func (in *instance) completions(fn func(runID uuid.UUID)) (stop func()) {
	in.finished.Store(&fn)
	return func() { in.finished.Store(nil) }
}

// runLatencies returns accept→finish (runs.created_at → finished_at) of
// every succeeded run, and how many runs there are by status.
func runLatencies(ctx context.Context, pool *pgxpool.Pool) ([]time.Duration, map[string]int, error) {
	rows, err := pool.Query(ctx, `SELECT (extract(epoch FROM finished_at - created_at) * 1000000)::bigint
		FROM converge_runs WHERE status = 'succeeded'`)
	if err != nil {
		return nil, nil, fmt.Errorf("read latencies: %w", err)
	}
	us, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, nil, fmt.Errorf("read latencies: %w", err)
	}
	ds := make([]time.Duration, len(us))
	for i, u := range us {
		ds[i] = time.Duration(u) * time.Microsecond
	}
	rows, err = pool.Query(ctx, `SELECT status, count(*) FROM converge_runs GROUP BY status`)
	if err != nil {
		return nil, nil, fmt.Errorf("count runs: %w", err)
	}
	byStatus := map[string]int{}
	for rows.Next() {
		var s string
		var n int
		if err := rows.Scan(&s, &n); err != nil {
			rows.Close()
			return nil, nil, fmt.Errorf("count runs: %w", err)
		}
		byStatus[s] = n
	}
	rows.Close()
	return ds, byStatus, rows.Err()
}

// resourceName is the resource key of stream i.
func resourceName(i int) string { return fmt.Sprintf("bench/s%05d", i) }
