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

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/config"
	"github.com/converge-run/converge/jobs"
	"github.com/converge-run/converge/store"
	"github.com/converge-run/converge/target"
	"github.com/converge-run/converge/telemetry"
)

// benchKind is the kind every converge benchmark submits.
const benchKind = "bench"

// instance is converge wired as `converge serve` wires it: a pool and the
// jobs service (River with the run worker when working, the store, the
// group commit, the reconciler and the promoter).
type instance struct {
	pool  *pgxpool.Pool
	svc   *jobs.Service
	store *store.Store
	// finished hears of every run the workers finish (jobs.Config's
	// RunFinished) once set.
	finished atomic.Pointer[func(run *converge.Run)]
	// tgt is the target startWorking made for the instance, closed by
	// stop; nil otherwise.
	tgt      *noopTarget
	stopOnce sync.Once
}

// benchPolicy is the policy of benchKind, the one kind of the benchmarks:
// the configuration's defaults, o.Workers attempts at once, 30 s each.
func benchPolicy(o Options) converge.KindPolicy {
	return converge.KindPolicy{
		Name: benchKind, MaxAttempts: config.DefaultMaxAttempts,
		Backoff:     converge.Backoff{Initial: config.DefaultBackoffInitial, Max: config.DefaultBackoffMax},
		Concurrency: o.Workers, Debounce: config.DefaultDebounce, Timeout: 30 * time.Second,
	}
}

// startInstance wires converge on the scratch database. With t it works
// jobs of benchKind (or of kinds, when given) against t (MaxWorkers
// o.Workers); without, it is an insert-only API process.
func startInstance(ctx context.Context, s *scratch, o Options, t target.Target, kinds ...string) (*instance, error) {
	pool, err := s.pool(ctx, o.PoolSize)
	if err != nil {
		return nil, err
	}
	if len(kinds) == 0 {
		kinds = []string{benchKind}
	}
	byName := make(map[string]*jobs.Kind, len(kinds))
	for _, name := range kinds {
		pol := benchPolicy(o)
		pol.Name = name
		byName[name] = &jobs.Kind{KindPolicy: pol, Target: t}
	}
	in := &instance{pool: pool}
	svc, err := jobs.NewService(pool, jobs.Config{
		Kinds: byName, Work: t != nil,
		RescueAfter: config.DefaultRescueAfter, FetchCooldown: o.FetchCooldown, FetchPollInterval: o.FetchPollInterval,
		SoftStopTimeout: 10 * time.Second, Logger: o.Logger, Metrics: telemetry.NewMetrics(prometheus.NewRegistry(), telemetry.Labels{Kinds: []string{benchKind}}),
		Retention: o.Retention,
		RunFinished: func(run *converge.Run, _ converge.RunStatus) {
			if fn := in.finished.Load(); fn != nil {
				(*fn)(run)
			}
		},
	})
	if err != nil {
		pool.Close()
		return nil, err
	}
	in.svc, in.store = svc, svc.Store()
	if err := svc.Start(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return in, nil
}

// startWorking starts an instance that works jobs of benchKind (or of
// kinds, when given) against a no-op target of its own, answering after
// o.Latency; stop closes that target after the instance.
func startWorking(ctx context.Context, s *scratch, o Options, kinds ...string) (*instance, error) {
	tgt := newNoopTarget(o.Latency, false)
	ht, err := tgt.httpTarget()
	if err != nil {
		tgt.close()
		return nil, err
	}
	in, err := startInstance(ctx, s, o, ht, kinds...)
	if err != nil {
		tgt.close()
		return nil, err
	}
	in.tgt = tgt
	return in, nil
}

// accept accepts an event as the API does (group-committed).
func (in *instance) accept(ctx context.Context, p store.EventAcceptParams) (*converge.EventAcceptResult, error) {
	return in.svc.GroupCommit().EventAccept(ctx, p)
}

// stop shuts the instance down as serve does: the service, then the pool;
// then it closes the target startWorking made. Only the first call does
// anything, so that a deferred stop may follow one in line.
func (in *instance) stop(ctx context.Context) {
	in.stopOnce.Do(func() {
		_ = in.svc.Stop(ctx)
		in.pool.Close()
		if in.tgt != nil {
			in.tgt.close()
		}
	})
}

// completions calls fn with the id of every run the workers finish, as
// soon as its outcome is committed, until the returned stop is called.
func (in *instance) completions(fn func(runID uuid.UUID)) (stop func()) {
	return in.finishedRuns(func(run *converge.Run) { fn(run.ID) })
}

// finishedRuns calls fn with every run the workers finish, as soon as its
// outcome is committed, until the returned stop is called.
func (in *instance) finishedRuns(fn func(run *converge.Run)) (stop func()) {
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
