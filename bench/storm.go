package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/config"
	"github.com/converge-run/converge/store"
	"github.com/converge-run/converge/target"
)

// Storm defaults and goal.
const (
	DefaultStormStreams  = 100
	DefaultStormVersions = 50
	DefaultStormLatency  = 10 * time.Millisecond
	// StormGoal is the most target calls a stream may take per burst.
	StormGoal = 3
)

// Storm measures supersession under a storm of versions: in each of
// o.Bursts bursts, o.Streams streams (default 100) each get o.Events
// versions (default 50) accepted back to back through store.EventAccept,
// one goroutine per stream, while the workers run against an in-process
// target answering after o.Latency (default 10ms). A burst ends when every
// stream has applied its last version. It reports the target calls each
// stream took per burst (the goal: at most 3), the time each stream took
// from its last accept to applying it (the latency percentiles), and the
// rate of events absorbed (events accepted / time until convergence).
//
// The anchor is River without supersession: the same bursts, each event
// inserted in its own transaction as a job whose worker calls the same
// target, until every job is done; its rate is events / that time.
func Storm(ctx context.Context, o Options) (*Result, error) {
	o = o.withDefaults()
	if o.Streams <= 0 {
		o.Streams = DefaultStormStreams
	}
	if o.Events <= 0 {
		o.Events = DefaultStormVersions
	}
	if o.Latency <= 0 {
		o.Latency = DefaultStormLatency
	}
	return withScratch(ctx, o, func(s *scratch) (*Result, error) {
		tgt := newNoopTarget(o.Latency, true)
		defer tgt.close()
		ht, err := tgt.httpTarget()
		if err != nil {
			return nil, err
		}
		o.logf("anchor: River running every event, %d bursts of %d streams × %d versions", o.Bursts, o.Streams, o.Events)
		anchor, anchorCalls, err := stormAnchor(ctx, s, o, ht, tgt)
		if err != nil {
			return nil, err
		}
		o.logf("anchor: %.0f events/s", perSecond(o.Bursts*o.Streams*o.Events, anchor))
		o.logf("converge: %d bursts of %d streams × %d versions", o.Bursts, o.Streams, o.Events)
		var conv stormRun
		err = o.profile(func() error {
			var err error
			conv, err = stormConverge(ctx, s, o, ht, tgt)
			return err
		})
		if err != nil {
			return nil, err
		}
		total := o.Bursts * o.Streams * o.Events
		o.logf("converge: %.0f events/s, at most %d calls per stream per burst", perSecond(total, conv.elapsed), conv.maxCalls)
		r := &Result{
			Benchmark: "storm", RateUnit: "events/s",
			Rate:       perSecond(total, conv.elapsed),
			AnchorRate: perSecond(total, anchor),
			Anchor:     "River running every event (no supersession), same target and workers",
			Latency:    "a stream's last accept to its applied_version reaching it",
			Goal:       fmt.Sprintf("<= %d target calls per stream per burst", StormGoal),
		}
		r.Ratio = ratio(r.Rate, r.AnchorRate)
		r.P50, r.P95, r.P99 = percentiles(conv.latencies)
		r.GoalMet = conv.maxCalls <= StormGoal
		r.add("streams", "streams", o.Streams)
		r.add("versions", "versions per stream per burst", o.Events)
		r.add("bursts", "bursts", o.Bursts)
		r.add("target_latency_ms", "target latency", o.Latency)
		r.add("calls_per_stream_max", "calls per stream per burst, max", conv.maxCalls)
		r.add("calls_per_stream_mean", "calls per stream per burst, mean", round(float64(conv.calls)/float64(o.Bursts*o.Streams), 2))
		perStream := func(n int) float64 { return round(float64(n)/float64(o.Bursts*o.Streams), 2) }
		r.add("calls_first_version", "attempts of a burst's first version, per stream per burst", perStream(conv.first))
		r.add("calls_middle_versions", "attempts of a burst's other versions but the last, per stream per burst", perStream(conv.middle))
		r.add("calls_last_version", "attempts of a burst's last version, per stream per burst", perStream(conv.last))
		r.add("accept_gaps_over_debounce", "accepts of a stream at least the debounce after its previous one (each ends a burst)", conv.gaps)
		r.add("accept_gap_max_ms", "longest time between consecutive accepts of a stream", conv.maxGap)
		r.add("deadlocks", "deadlocks PostgreSQL broke in converge's bursts (each a stall of deadlock_timeout)", conv.deadlocks)
		ap50, ap95, ap99 := percentiles(conv.accepts)
		r.add("accept_p50_ms", "accept latency p50 (group-committed)", ap50)
		r.add("accept_p95_ms", "accept latency p95", ap95)
		r.add("accept_p99_ms", "accept latency p99", ap99)
		r.add("anchor_calls_per_stream", "anchor calls per stream per burst", round(float64(anchorCalls)/float64(o.Bursts*o.Streams), 2))
		r.add("converge_ms_per_burst", "time to converge, per burst", conv.burstTimes)
		r.add("elapsed_ms", "converge elapsed", conv.elapsed)
		r.add("anchor_elapsed_ms", "anchor elapsed", anchor)
		return r, nil
	})
}

type stormRun struct {
	elapsed    time.Duration
	burstTimes []float64 // ms
	latencies  []time.Duration
	maxCalls   int
	calls      int
	// Where the calls went (attempts begun, by the version's place in its
	// burst) and why a middle version can be called: accepts of a stream
	// further apart than the debounce end a burst, by design.
	first, middle, last int
	gaps                int           // consecutive accepts of a stream at least the debounce apart
	maxGap              time.Duration // the longest time between consecutive accepts of a stream
	accepts             []time.Duration
	deadlocks           int64 // broken by PostgreSQL during the bursts
}

// burst runs accept(stream, version) for every stream and version of burst
// b, one goroutine per stream, versions in order.
func burst(ctx context.Context, o Options, b int, accept func(ctx context.Context, stream int, version int64) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	for i := range o.Streams {
		wg.Go(func() {
			for v := range o.Events {
				if ctx.Err() != nil {
					return
				}
				if err := accept(ctx, i, int64(b*o.Events+v+1)); err != nil {
					cancel(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return context.Cause(ctx)
}

func stormConverge(ctx context.Context, s *scratch, o Options, ht target.Target, tgt *noopTarget) (stormRun, error) {
	var out stormRun
	in, err := startInstance(ctx, s, o, ht)
	if err != nil {
		return out, err
	}
	defer in.stop(ctx)
	deadlocks0, err := deadlocks(ctx, in.pool)
	if err != nil {
		return out, err
	}
	tgt.takeCounts()
	out.accepts = make([]time.Duration, o.Bursts*o.Streams*o.Events)
	start := time.Now()
	for b := range o.Bursts {
		t0 := time.Now()
		err := burst(ctx, o, b, func(ctx context.Context, i int, v int64) error {
			a0 := time.Now()
			_, err := in.accept(ctx, store.EventAcceptParams{
				EventSubmission: converge.EventSubmission{Kind: benchKind, Resource: resourceName(i), Version: v, Payload: json.RawMessage(`{}`)},
				MaxAttempts:     config.DefaultMaxAttempts, Debounce: config.DefaultDebounce,
			})
			// Each (stream, version) is accepted once, by its stream's goroutine.
			out.accepts[i*o.Bursts*o.Events+int(v)-1] = time.Since(a0)
			return err
		})
		if err != nil {
			return out, fmt.Errorf("storm burst %d: %w", b+1, err)
		}
		last := int64((b + 1) * o.Events)
		lat, err := waitApplied(ctx, in.pool, o.Streams, last)
		if err != nil {
			return out, fmt.Errorf("storm burst %d: %w", b+1, err)
		}
		out.burstTimes = append(out.burstTimes, round(float64(time.Since(t0))/float64(time.Millisecond), 1))
		out.latencies = append(out.latencies, lat...)
		counts := tgt.takeCounts()
		for i := range o.Streams {
			c := counts[resourceName(i)]
			out.calls += c
			out.maxCalls = max(out.maxCalls, c)
		}
		if err := out.explainBurst(ctx, in.pool, int64(b*o.Events), last, config.DefaultDebounce); err != nil {
			return out, fmt.Errorf("storm burst %d: %w", b+1, err)
		}
	}
	out.elapsed = time.Since(start)
	deadlocks1, err := deadlocks(ctx, in.pool)
	if err != nil {
		return out, err
	}
	out.deadlocks = deadlocks1 - deadlocks0
	return out, nil
}

// deadlocks is how many deadlocks PostgreSQL has broken in the scratch
// database so far (pg_stat_database; its counters may lag by a second).
// Each one stalled a transaction for deadlock_timeout (1 s by default).
func deadlocks(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	var n int64
	if err := pool.QueryRow(ctx, `SELECT coalesce(deadlocks, 0) FROM pg_stat_database WHERE datname = current_database()`).Scan(&n); err != nil {
		return 0, fmt.Errorf("read deadlock count: %w", err)
	}
	return n, nil
}

// explainBurst adds up where the calls of the burst of versions (from,
// last] went (attempts of its first, middle and last versions) and the
// accepts of a stream that came at least debounce after the one before
// (from the events' received_at), which end a burst by the debounce's rule
// and so let the version before them be called.
func (out *stormRun) explainBurst(ctx context.Context, pool *pgxpool.Pool, from, last int64, debounce time.Duration) error {
	var first, middle, lastCalls, gaps int
	var maxGapUS int64
	err := pool.QueryRow(ctx, `SELECT
			count(*) FILTER (WHERE r.version = $2 + 1), count(*) FILTER (WHERE r.version > $2 + 1 AND r.version < $3),
			count(*) FILTER (WHERE r.version = $3)
		FROM converge_attempts a JOIN converge_runs r ON r.id = a.run_id
		WHERE r.kind = $1 AND r.version > $2 AND r.version <= $3`, benchKind, from, last).Scan(&first, &middle, &lastCalls)
	if err != nil {
		return fmt.Errorf("count calls by version: %w", err)
	}
	err = pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE gap >= $4 * interval '1 microsecond'),
			coalesce((extract(epoch FROM max(gap)) * 1000000)::bigint, 0)
		FROM (SELECT received_at - lag(received_at) OVER (PARTITION BY resource ORDER BY version) AS gap
			FROM converge_events WHERE kind = $1 AND version > $2 AND version <= $3) g
		WHERE gap IS NOT NULL`, benchKind, from, last, debounce.Microseconds()).Scan(&gaps, &maxGapUS)
	if err != nil {
		return fmt.Errorf("measure gaps between accepts: %w", err)
	}
	out.first, out.middle, out.last = out.first+first, out.middle+middle, out.last+lastCalls
	out.gaps += gaps
	out.maxGap = max(out.maxGap, time.Duration(maxGapUS)*time.Microsecond)
	return nil
}

// waitApplied polls until every stream has applied version last and
// returns, per stream, the time from the last version's acceptance to it
// being applied.
func waitApplied(ctx context.Context, pool *pgxpool.Pool, streams int, last int64) ([]time.Duration, error) {
	for {
		var n int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM converge_streams WHERE kind = $1 AND applied_version = $2`, benchKind, last).Scan(&n)
		if err != nil {
			return nil, fmt.Errorf("poll applied versions: %w", err)
		}
		if n >= streams {
			break
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%d of %d streams applied version %d: %w", n, streams, last, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
	rows, err := pool.Query(ctx, `SELECT (extract(epoch FROM s.applied_at - e.received_at) * 1000000)::bigint
		FROM converge_streams s JOIN converge_events e ON e.kind = s.kind AND e.resource = s.resource AND e.version = s.applied_version
		WHERE s.kind = $1`, benchKind)
	if err != nil {
		return nil, fmt.Errorf("read convergence times: %w", err)
	}
	us, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("read convergence times: %w", err)
	}
	ds := make([]time.Duration, len(us))
	for i, u := range us {
		ds[i] = time.Duration(max(u, 0)) * time.Microsecond
	}
	return ds, nil
}

// stormAnchor runs the bursts on bare River, every event a job calling the
// target; it returns the total time and the target calls.
func stormAnchor(ctx context.Context, s *scratch, o Options, ht target.Target, tgt *noopTarget) (time.Duration, int, error) {
	pool, err := s.pool(ctx, o.PoolSize)
	if err != nil {
		return 0, 0, err
	}
	defer pool.Close()
	workers := river.NewWorkers()
	river.AddWorker(workers, &anchorWorker{call: ht})
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Logger: o.Logger, Workers: workers, Queues: map[string]river.QueueConfig{anchorQueue: {MaxWorkers: o.Workers}},
		FetchCooldown: o.FetchCooldown, FetchPollInterval: o.FetchPollInterval,
	})
	if err != nil {
		return 0, 0, fmt.Errorf("anchor client: %w", err)
	}
	perBurst := o.Streams * o.Events
	events, cancel := client.SubscribeConfig(&river.SubscribeConfig{Kinds: []river.EventKind{river.EventKindJobCompleted}, ChanSize: perBurst + 1000})
	defer cancel()
	if err := client.Start(ctx); err != nil {
		return 0, 0, fmt.Errorf("start anchor client: %w", err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = client.Stop(sctx)
	}()
	tgt.takeCounts()
	start := time.Now()
	calls := 0
	for b := range o.Bursts {
		err := burst(ctx, o, b, func(ctx context.Context, i int, v int64) error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				_, err := client.InsertTx(ctx, tx, anchorArgs{Resource: resourceName(i), Version: v}, &river.InsertOpts{Queue: anchorQueue})
				return err
			})
		})
		if err != nil {
			return 0, 0, fmt.Errorf("anchor burst %d: %w", b+1, err)
		}
		for done := 0; done < perBurst; {
			select {
			case <-ctx.Done():
				return 0, 0, fmt.Errorf("anchor burst %d: %d of %d jobs done: %w", b+1, done, perBurst, ctx.Err())
			case <-events:
				done++
			}
		}
		for _, c := range tgt.takeCounts() {
			calls += c
		}
	}
	return time.Since(start), calls, nil
}
