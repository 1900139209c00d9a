package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/config"
	"github.com/converge-run/converge/store"
)

// History defaults and goals.
const (
	DefaultHistoryEvents = 2_000_000
	// HistoryDeadLetters is how many of the filled events failed for good
	// (at most half of them).
	HistoryDeadLetters = 100_000
	// historyStreams is how many streams the filled events are spread
	// over.
	historyStreams = 10_000
	// historyPipelineEvents is the size of each pipeline measurement.
	historyPipelineEvents = 10_000
	// historyPipelineStreams is the number of streams the pipeline
	// measurements run over.
	historyPipelineStreams = 100
	// HistoryGoal is the ratio of the pipeline's rate over a full history
	// to its rate on an empty database that History aims at, and
	// HistoryListGoal the p95 of the dead-letter list over it.
	HistoryGoal     = 0.9
	HistoryListGoal = 50 * time.Millisecond
)

// historyRetention is the retention History's prune applies: SPEC §13's
// defaults, so that the events of the filled history's older half (it
// spans 60 days) go.
var historyRetention = converge.Retention{Runs: converge.DefaultRetainRuns, DeadLetters: converge.DefaultRetainDeadLetters,
	WorkflowRuns: converge.DefaultRetainRuns, Deliveries: converge.DefaultRetainDeliveries, Audit: converge.DefaultRetainAudit}

// History measures converge over a long history: the pipeline (as
// Pipeline runs it: every stream sends its next version when its previous
// run finished, against a no-op target) and the dead-letter list, first on
// an empty scratch database (the anchor, before and after), and on another
// after filling it with
// o.Events finished events (default 2,000,000; each with its run and
// attempt, HistoryDeadLetters of them failed with a dead letter, a quarter
// of those open; received over the last 60 days on 10,000 streams) by
// INSERT ... SELECT generate_series. The rate is the pipeline's over the
// history, the anchor its rate on the empty database, and the latencies
// EventAccept's over the history. Then one pruning pass with SPEC §13's
// default retention deletes the older half while the pipeline runs on:
// accept p99 during the prune says whether pruning blocks accepts.
func History(ctx context.Context, o Options) (*Result, error) {
	o = o.withDefaults()
	if o.Events <= 0 {
		o.Events = DefaultHistoryEvents
	}
	dls := min(HistoryDeadLetters, o.Events/2)
	// Each pipeline measurement: 10,000 events, fewer for a small history.
	pipelineEvents := min(historyPipelineEvents, max(o.Events/5, 200))
	return withScratch(ctx, o, func(s *scratch) (*Result, error) {
		tgt := newNoopTarget(o.Latency, false)
		defer tgt.close()
		ht, err := tgt.httpTarget()
		if err != nil {
			return nil, err
		}
		admin, err := s.pool(ctx, 4)
		if err != nil {
			return nil, err
		}
		defer admin.Close()

		// The anchor's database: empty but for the pipeline's own events.
		e, err := newScratch(ctx, o)
		if err != nil {
			return nil, err
		}
		defer func() { _ = e.close(ctx, o) }()
		measure := func(phase string, db *scratch) (historyRun, error) {
			in, err := startInstance(ctx, db, o, ht)
			if err != nil {
				return historyRun{}, err
			}
			defer in.stop(ctx)
			o.logf("%s: pipeline, %d events over %d streams", phase, pipelineEvents, min(historyPipelineStreams, pipelineEvents))
			run, err := historyPipeline(ctx, in, phase, pipelineEvents, nil)
			if err != nil {
				return run, err
			}
			run.list, err = historyList(ctx, in.store, o.Samples)
			o.logf("%s: %.0f events/s, accept p99 %s, dead-letter list p95 %s", phase, run.rate(), format(percentile(run.accepts, 99)),
				format(percentile(run.list, 95)))
			return run, err
		}

		empty, err := measure("empty", e)
		if err != nil {
			return nil, err
		}
		o.logf("filling %d events (%d dead letters)", o.Events, dls)
		t0 := time.Now()
		if err := historyFill(ctx, admin, o.Events, dls); err != nil {
			return nil, err
		}
		fillTime := time.Since(t0)
		o.logf("filled in %s", fillTime.Round(time.Second))
		sizes, err := tableSizes(ctx, admin)
		if err != nil {
			return nil, err
		}
		full, err := measure("full", s)
		if err != nil {
			return nil, err
		}
		empty2, err := measure("empty-again", e)
		if err != nil {
			return nil, err
		}

		// The prune, under load.
		in, err := startInstance(ctx, s, o, ht)
		if err != nil {
			return nil, err
		}
		stop := make(chan struct{})
		var during historyRun
		var duringErr error
		var wg sync.WaitGroup
		wg.Go(func() { during, duringErr = historyPipeline(ctx, in, "prune", 0, stop) })
		o.logf("pruning with the default retention (runs %s, dead letters %s) while the pipeline runs", historyRetention.Runs, historyRetention.DeadLetters)
		t0 = time.Now()
		pruned, err := in.store.Prune(ctx, store.PruneParams{Retention: historyRetention, Trigger: "bench"})
		pruneTime := time.Since(t0)
		close(stop)
		wg.Wait()
		in.stop(ctx)
		if err != nil {
			return nil, err
		}
		if duringErr != nil {
			return nil, duringErr
		}
		o.logf("pruned %d rows in %s (%d batches); accept p99 meanwhile %s", pruned.Total, pruneTime.Round(time.Millisecond), pruned.Batches,
			format(percentile(during.accepts, 99)))
		if _, err := admin.Exec(ctx, `VACUUM ANALYZE converge_events, converge_runs, converge_attempts, converge_dead_letters`); err != nil {
			return nil, fmt.Errorf("vacuum: %w", err)
		}
		after, err := tableSizes(ctx, admin)
		if err != nil {
			return nil, err
		}

		r := &Result{
			Benchmark: "history", RateUnit: "events/s",
			Rate:       full.rate(),
			AnchorRate: (empty.rate() + empty2.rate()) / 2,
			Anchor:     "the same pipeline on an empty database, before and after (mean), same run",
			Latency:    "EventAccept over the history",
			Goal:       fmt.Sprintf("ratio >= %.2f and dead-letter list p95 < %s", HistoryGoal, HistoryListGoal),
		}
		r.Ratio = ratio(r.Rate, r.AnchorRate)
		r.P50, r.P95, r.P99 = percentiles(full.accepts)
		listP95 := percentile(full.list, 95)
		r.GoalMet = r.Ratio >= HistoryGoal && listP95 < HistoryListGoal
		r.add("events", "events filled", o.Events)
		r.add("dead_letters", "dead letters filled", dls)
		r.add("fill_s", "fill time (s)", round(fillTime.Seconds(), 1))
		r.add("pipeline_events", "pipeline events per measurement", pipelineEvents)
		emptyAccepts := append(append([]time.Duration(nil), empty.accepts...), empty2.accepts...)
		emptyList := append(append([]time.Duration(nil), empty.list...), empty2.list...)
		r.add("anchor_rate_before", "anchor before (events/s)", round(empty.rate(), 1))
		r.add("anchor_rate_after", "anchor after (events/s)", round(empty2.rate(), 1))
		r.add("accept_p99_empty_ms", "EventAccept p99, empty database", percentile(emptyAccepts, 99))
		r.add("list_p95_ms", "dead-letter list p95, over the history", listP95)
		r.add("list_p95_empty_ms", "dead-letter list p95, empty database", percentile(emptyList, 95))
		r.add("bytes_per_event", "bytes per event (events, runs, attempts with indexes)", sizes.perEvent(o.Events))
		r.add("table_bytes", "", sizes.bytes)
		r.add("table_rows", "", sizes.rows)
		for _, t := range sizes.order {
			r.add("", "  "+t, fmt.Sprintf("%d rows, %s", sizes.rows[t], mib(sizes.bytes[t])))
		}
		r.add("pruned_rows", "", pruned.Deleted)
		r.add("pruned_total", "rows pruned", pruned.Total)
		r.add("prune_s", "prune time (s)", round(pruneTime.Seconds(), 1))
		r.add("prune_rows_per_s", "prune rate (rows/s)", round(perSecond(int(pruned.Total), pruneTime), 0))
		r.add("prune_batches", "prune batches", pruned.Batches)
		r.add("accept_p50_during_prune_ms", "EventAccept p50 during the prune", percentile(during.accepts, 50))
		r.add("accept_p99_during_prune_ms", "EventAccept p99 during the prune", percentile(during.accepts, 99))
		r.add("rate_during_prune", "pipeline during the prune (events/s)", round(during.rate(), 1))
		r.add("table_bytes_after_prune", "", after.bytes)
		r.add("table_rows_after_prune", "", after.rows)
		for _, t := range after.order {
			r.add("", "  after prune: "+t, fmt.Sprintf("%d rows, %s", after.rows[t], mib(after.bytes[t])))
		}
		return r, nil
	})
}

// historyRun is one pipeline measurement.
type historyRun struct {
	events  int
	elapsed time.Duration
	accepts []time.Duration
	list    []time.Duration
}

func (h historyRun) rate() float64 { return perSecond(h.events, h.elapsed) }

// historyPipeline runs n events (with n 0: until stop is closed) over
// historyPipelineStreams streams named phase/sNNNNN: each stream sends its
// next version once its previous run finished.
func historyPipeline(ctx context.Context, in *instance, phase string, n int, stop <-chan struct{}) (historyRun, error) {
	var out historyRun
	k := historyPipelineStreams
	if n > 0 {
		k = min(k, n)
	}
	load := newStreamLoad[uuid.UUID](k)
	stopSub := in.completions(load.finish)
	defer stopSub()
	lr, err := load.run(ctx, streamLoadParams[uuid.UUID]{
		Events: n, Stop: stop,
		Send: func(ctx context.Context, i int, v int64) (uuid.UUID, error) {
			res, err := in.accept(ctx, store.EventAcceptParams{
				EventSubmission: converge.EventSubmission{Kind: benchKind, Resource: fmt.Sprintf("%s/s%05d", phase, i), Version: v, Payload: json.RawMessage(`{}`)},
				MaxAttempts:     config.DefaultMaxAttempts,
			})
			if err != nil {
				return uuid.UUID{}, err
			}
			return res.Run.ID, nil
		},
	})
	out.events, out.elapsed, out.accepts = len(load.sends), lr.elapsed, load.sends
	if err != nil {
		return out, fmt.Errorf("pipeline %s: %w", phase, err)
	}
	return out, nil
}

// historyList times the dead-letter list (store.DeadLetterList, the
// API's and the dashboard's query): the default open list and filters by
// status, kind, resource prefix and error text, each samples times, every
// other one on its second page.
func historyList(ctx context.Context, st *store.Store, samples int) ([]time.Duration, error) {
	filters := []converge.DeadLetterFilter{
		{},
		{Status: converge.DeadLetterDiscarded},
		{Kind: benchKind},
		{Resource: "hist/svc-00"},
		{Q: "invalid build"},
		{Status: converge.DeadLetterRedriven, Resource: "hist/svc-1"},
	}
	var out []time.Duration
	for _, f := range filters {
		for i := range samples {
			p := &converge.DeadLetterListParams{DeadLetterFilter: f, Limit: 50}
			if i%2 == 1 {
				_, next, err := st.DeadLetterList(ctx, p)
				if err != nil {
					return nil, err
				}
				p.Cursor = next
			}
			t := time.Now()
			if _, _, err := st.DeadLetterList(ctx, p); err != nil {
				return nil, fmt.Errorf("dead-letter list: %w", err)
			}
			out = append(out, time.Since(t))
		}
	}
	return out, nil
}

// v7SQL is a version 7 UUID of the timestamp expression %s, as converge
// makes ids (the time in its first 48 bits).
const v7SQL = `encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid())
	PLACING substring(int8send((extract(epoch FROM %[1]s) * 1000)::bigint) FROM 3) FROM 1 FOR 6), 52, 1), 53, 1), 'hex')::uuid`

func v7(at string) string { return fmt.Sprintf(v7SQL, at) }

// historyFill writes n finished events of benchKind on historyStreams
// streams ("hist/svc-NNNNN"), received over the last 60 days in version
// order, each with its run and attempt; dls of them (evenly spread)
// failed with a permanent error and have a dead letter: a quarter open,
// the rest redriven, discarded or superseded an hour after. Set-based, in
// one transaction; then VACUUM ANALYZE.
func historyFill(ctx context.Context, pool *pgxpool.Pool, n, dls int) error {
	step := max(n/max(dls, 1), 1)
	stmts := []string{
		`SET LOCAL work_mem = '256MB'`,
		`CREATE TEMP TABLE hist ON COMMIT DROP AS
		 SELECT g, at, ` + v7("at") + ` AS event_id, ` + v7("at + interval '1 ms'") + ` AS run_id,
		        'hist/svc-' || lpad((g % ` + fmt.Sprint(historyStreams) + `)::text, 5, '0') AS resource,
		        (g / ` + fmt.Sprint(historyStreams) + `)::bigint + 1 AS version,
		        ` + fmt.Sprintf("(%d > 0 AND g %% %d = 0)", dls, step) + ` AS failed,
		        (g / ` + fmt.Sprint(step) + `) % 20 AS bucket
		   FROM (SELECT g, now() - interval '60 days' + (g::float8 / $1) * interval '59 days' AS at
		           FROM generate_series(0, $1 - 1) AS g) AS x`,
		`INSERT INTO converge_events (id, kind, resource, version, payload, received_at)
		 SELECT event_id, 'bench', resource, version, jsonb_build_object('commit', md5(g::text), 'ref', 'main'), at FROM hist ORDER BY event_id`,
		`INSERT INTO converge_runs (id, event_id, number, kind, resource, version, status, attempts, max_attempts,
		                           created_at, started_at, finished_at, error, output)
		 SELECT run_id, event_id, 1, 'bench', resource, version, CASE WHEN failed THEN 'failed' ELSE 'succeeded' END, 1, 10,
		        at, at + interval '20 ms', at + interval '120 ms',
		        CASE WHEN failed THEN jsonb_build_object('class', 'permanent', 'message', 'http status 422: invalid build ' || g, 'http_status', 422) END,
		        CASE WHEN NOT failed THEN jsonb_build_object('artifact', resource || '@' || version) END
		   FROM hist ORDER BY run_id`,
		`INSERT INTO converge_attempts (run_id, number, outcome, started_at, finished_at, duration_ms, error)
		 SELECT run_id, 1, CASE WHEN failed THEN 'permanent_error' ELSE 'succeeded' END, at + interval '20 ms', at + interval '120 ms', 100,
		        CASE WHEN failed THEN jsonb_build_object('class', 'permanent', 'message', 'http status 422: invalid build ' || g, 'http_status', 422) END
		   FROM hist ORDER BY run_id`,
		`INSERT INTO converge_dead_letters (id, event_id, run_id, kind, resource, version, reason, attempts, error, errors,
		                                   error_text, payload, status, created_at, resolved_at, resolved_by, superseded_by_version)
		 SELECT ` + v7("at + interval '120 ms'") + `, event_id, run_id, 'bench', resource, version, 'permanent_error', 1,
		        jsonb_build_object('class', 'permanent', 'message', 'http status 422: invalid build ' || g, 'http_status', 422),
		        jsonb_build_array(jsonb_build_object('class', 'permanent', 'message', 'http status 422: invalid build ' || g, 'http_status', 422)),
		        'http status 422: invalid build ' || g, jsonb_build_object('commit', md5(g::text), 'ref', 'main'), st,
		        at + interval '120 ms', CASE WHEN st <> 'open' THEN at + interval '1 hour' END,
		        CASE WHEN st IN ('redriven', 'discarded') THEN 'oncall' WHEN st = 'superseded' THEN 'converge' END,
		        CASE WHEN st = 'superseded' THEN version + 1 END
		   FROM (SELECT *, CASE WHEN bucket < 5 THEN 'open' WHEN bucket < 10 THEN 'redriven' WHEN bucket < 17 THEN 'discarded'
		                        ELSE 'superseded' END AS st FROM hist WHERE failed) AS f`,
		`INSERT INTO converge_streams (kind, resource, latest_version, applied_version, latest_at)
		 SELECT 'bench', resource, max(version), max(version) FILTER (WHERE NOT failed), max(at) FROM hist GROUP BY resource`,
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("fill: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	for _, sql := range stmts {
		var args []any
		if strings.Contains(sql, "$1") {
			args = []any{n}
		}
		if _, err := tx.Exec(ctx, sql, args...); err != nil {
			return fmt.Errorf("fill: %s: %w", strings.Fields(sql)[0]+" "+strings.Fields(sql)[1]+" "+strings.Fields(sql)[2], err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("fill: %w", err)
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE converge_events, converge_runs, converge_attempts, converge_dead_letters, converge_streams`); err != nil {
		return fmt.Errorf("fill: vacuum: %w", err)
	}
	return nil
}

// sizes are rows and bytes (with indexes and TOAST) of converge's tables.
type sizes struct {
	order []string
	rows  map[string]int64
	bytes map[string]int64
}

// sizedTables are the tables tableSizes reads.
var sizedTables = []string{"converge_events", "converge_runs", "converge_attempts", "converge_dead_letters",
	"converge_workflow_runs", "converge_workflow_steps", "converge_deliveries", "converge_audit", "converge_streams", "river_job"}

// tableSizes counts the rows of converge's tables and their bytes.
func tableSizes(ctx context.Context, pool *pgxpool.Pool) (sizes, error) {
	out := sizes{order: sizedTables, rows: map[string]int64{}, bytes: map[string]int64{}}
	for _, t := range sizedTables {
		var rows, bytes int64
		if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM `+t+`), pg_total_relation_size($1::regclass)`, t).Scan(&rows, &bytes); err != nil {
			return out, fmt.Errorf("size of %s: %w", t, err)
		}
		out.rows[t], out.bytes[t] = rows, bytes
	}
	return out, nil
}

// perEvent is the bytes of events, runs and attempts per event of n.
func (s sizes) perEvent(n int) float64 {
	if n == 0 {
		return 0
	}
	return float64(s.bytes["converge_events"]+s.bytes["converge_runs"]+s.bytes["converge_attempts"]) / float64(n)
}

// converge is the sum of the rows and bytes of converge's own tables
// (all but River's job table).
func (s sizes) converge() (rows, bytes int64) {
	for _, t := range s.order {
		if strings.HasPrefix(t, "converge_") {
			rows += s.rows[t]
			bytes += s.bytes[t]
		}
	}
	return rows, bytes
}

// mib formats bytes in MiB.
func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
