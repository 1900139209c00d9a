package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/api"
	"github.com/converge-run/converge/config"
	"github.com/converge-run/converge/jobs"
	"github.com/converge-run/converge/store"
	"github.com/converge-run/converge/ui"
)

// DLQ defaults and goal.
const (
	DefaultDLQEvents = 1_000_000
	// DLQGoal is the p95 every list query must stay under.
	DLQGoal = 50 * time.Millisecond
)

// dlqDims are the filters combined by DLQ, in the order of a combination's
// name. Each has a few values that samples take in turn, from common to
// rare, so that a combination's percentiles cover both.
var dlqDims = []struct {
	name string
	set  func(f *converge.DeadLetterFilter, i int, newest time.Time)
}{
	{"status", func(f *converge.DeadLetterFilter, i int, _ time.Time) {
		f.Status = []converge.DeadLetterStatus{converge.DeadLetterDiscarded, converge.DeadLetterRedriven, converge.DeadLetterSuperseded}[i%3]
	}},
	{"kind", func(f *converge.DeadLetterFilter, i int, _ time.Time) {
		f.Kind = []string{"build", "deploy", "test"}[i%3]
	}},
	{"resource", func(f *converge.DeadLetterFilter, i int, _ time.Time) {
		f.Resource = []string{"prod/", "app/svc-0000", "staging/svc-1", "prod/svc-19999"}[i%4]
	}},
	{"reason", func(f *converge.DeadLetterFilter, i int, _ time.Time) {
		f.Reason = []converge.DeadLetterReason{converge.ReasonPermanentError, converge.ReasonAttemptsExhausted}[i%2]
	}},
	{"q", func(f *converge.DeadLetterFilter, i int, _ time.Time) {
		f.Q = []string{"connection refused", "certificate has expired", "manifest", "no such text anywhere"}[i%4]
	}},
	{"since_until", func(f *converge.DeadLetterFilter, i int, newest time.Time) {
		day := 24 * time.Hour
		at := func(d time.Duration) *time.Time { t := newest.Add(-d); return &t }
		switch i % 3 {
		case 0:
			f.Since = at(day)
		case 1:
			f.Since, f.Until = at(46*day), at(45*day)
		default:
			f.Until = at(60 * day)
		}
	}},
}

// DLQ measures the dead-letter list: o.Events dead letters (default
// 1,000,000, shaped as docs/dead-letters.md describes them: 90 days,
// four statuses, three kinds, 20,000 resources under three prefixes, two
// reasons, six families of error text) are generated with INSERT ... SELECT
// generate_series in a scratch database, then every combination of the
// filters status, kind, resource (prefix), reason, q (error text) and
// since/until runs o.Samples times (default 20) through
// store.DeadLetterList, every other sample on the page after the first
// (keyset cursor). It reports p50 and p95 per combination (the goal: every
// p95 under 50ms), the same over all queries, and the dashboard's list page
// (GET /ui/dead-letters, signed in, rendered) for each combination.
//
// The anchor is the simplest indexed page, SELECT ... WHERE status = 'open'
// ORDER BY created_at DESC, id DESC LIMIT 51, run as many times: the rate
// ratio says how far the filtered lists are from it.
func DLQ(ctx context.Context, o Options) (*Result, error) {
	o = o.withDefaults()
	if o.Events <= 0 {
		o.Events = DefaultDLQEvents
	}
	return withScratch(ctx, o, func(s *scratch) (*Result, error) {
		pool, err := s.pool(ctx, 4)
		if err != nil {
			return nil, err
		}
		defer pool.Close()
		o.logf("generating %d dead letters", o.Events)
		t0 := time.Now()
		if err := dlqGenerate(ctx, pool, o.Events); err != nil {
			return nil, err
		}
		o.logf("generated in %s", time.Since(t0).Round(time.Millisecond))
		var newest time.Time
		if err := pool.QueryRow(ctx, `SELECT max(created_at) FROM converge_dead_letters`).Scan(&newest); err != nil {
			return nil, fmt.Errorf("newest dead letter: %w", err)
		}
		svc, err := jobs.NewService(pool, jobs.Config{Logger: o.Logger})
		if err != nil {
			return nil, err
		}
		st := svc.Store()
		combos := 1 << len(dlqDims)
		samples := o.Samples

		// The anchor first, then the lists, then the anchor again: its rate
		// is the mean of both.
		anchor := func() ([]time.Duration, error) {
			sql, args := store.DeadLetterListSQL(&converge.DeadLetterListParams{Limit: 50})
			ds := make([]time.Duration, 0, samples*combos/2)
			for range cap(ds) {
				t := time.Now()
				rows, err := pool.Query(ctx, sql, args...)
				if err != nil {
					return nil, fmt.Errorf("anchor query: %w", err)
				}
				rows.Close()
				if err := rows.Err(); err != nil {
					return nil, fmt.Errorf("anchor query: %w", err)
				}
				ds = append(ds, time.Since(t))
			}
			return ds, nil
		}
		a1, err := anchor()
		if err != nil {
			return nil, err
		}

		type comboStat struct {
			name     string
			p50, p95 time.Duration
		}
		var stats []comboStat
		var all []time.Duration
		var total time.Duration
		worst := comboStat{}
		err = o.profile(func() error {
			for c := range combos {
				name, f0 := dlqCombo(c, 0, newest)
				// One untimed run first, as a warm cache of a live system.
				if _, _, err := st.DeadLetterList(ctx, &converge.DeadLetterListParams{DeadLetterFilter: *f0, Limit: 50}); err != nil {
					return fmt.Errorf("list %s: %w", name, err)
				}
				ds := make([]time.Duration, 0, samples)
				for i := range samples {
					_, f := dlqCombo(c, i, newest)
					p := &converge.DeadLetterListParams{DeadLetterFilter: *f, Limit: 50}
					if i%2 == 1 {
						// The next page: its cursor comes from a first page
						// fetched outside the timing.
						_, next, err := st.DeadLetterList(ctx, p)
						if err != nil {
							return err
						}
						if next == nil {
							continue
						}
						p.Cursor = next
					}
					t := time.Now()
					if _, _, err := st.DeadLetterList(ctx, p); err != nil {
						return fmt.Errorf("list %s: %w", name, err)
					}
					d := time.Since(t)
					total += d
					ds = append(ds, d)
				}
				all = append(all, ds...)
				cs := comboStat{name: name, p50: percentile(ds, 50), p95: percentile(ds, 95)}
				stats = append(stats, cs)
				if cs.p95 >= worst.p95 {
					worst = cs
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		a2, err := anchor()
		if err != nil {
			return nil, err
		}
		anchorAll := append(a1, a2...)
		var anchorTotal time.Duration
		for _, d := range anchorAll {
			anchorTotal += d
		}

		page, err := dlqDashboard(ctx, s, o, st, newest)
		if err != nil {
			return nil, err
		}

		r := &Result{
			Benchmark: "dlq", RateUnit: "queries/s",
			Rate:       perSecond(len(all), total),
			AnchorRate: perSecond(len(anchorAll), anchorTotal),
			Anchor:     "the simplest indexed page (status = open, newest 51)",
			Latency:    "store.DeadLetterList, every filter combination",
			Goal:       fmt.Sprintf("p95 < %s for every filter combination", DLQGoal),
		}
		r.Ratio = ratio(r.Rate, r.AnchorRate)
		r.P50, r.P95, r.P99 = percentiles(all)
		r.GoalMet = worst.p95 < DLQGoal && page.p95 < DLQGoal
		r.add("dead_letters", "dead letters", o.Events)
		r.add("combinations", "filter combinations", combos)
		r.add("samples", "samples per combination", samples)
		r.add("worst_p95_ms", "worst p95", worst.p95)
		r.add("worst_combination", "worst combination", worst.name)
		r.add("anchor_p50_ms", "anchor p50", percentile(anchorAll, 50))
		r.add("anchor_p95_ms", "anchor p95", percentile(anchorAll, 95))
		r.add("dashboard_p50_ms", "dashboard list page p50", page.p50)
		r.add("dashboard_p95_ms", "dashboard list page p95", page.p95)
		r.add("dashboard_worst_p95_ms", "dashboard worst p95", page.worstP95)
		r.add("dashboard_worst_combination", "dashboard worst combination", page.worst)
		perCombo := map[string]map[string]float64{}
		for _, cs := range stats {
			perCombo[cs.name] = map[string]float64{"p50_ms": ms(cs.p50), "p95_ms": ms(cs.p95)}
			r.add("", "  "+cs.name, fmt.Sprintf("p50 %s  p95 %s", format(cs.p50), format(cs.p95)))
		}
		r.add("per_combination", "", perCombo)
		return r, nil
	})
}

// dlqCombo is combination c (a bit per filter of dlqDims) with the i-th
// values: its name and filter.
func dlqCombo(c, i int, newest time.Time) (string, *converge.DeadLetterFilter) {
	f := &converge.DeadLetterFilter{}
	var names []string
	for d, dim := range dlqDims {
		if c&(1<<d) != 0 {
			dim.set(f, i, newest)
			names = append(names, dim.name)
		}
	}
	if len(names) == 0 {
		return "open (no filter)", f
	}
	return strings.Join(names, "+"), f
}

type pageStats struct {
	p50, p95, worstP95 time.Duration
	worst              string
}

// dlqDashboard times GET /ui/dead-letters for every combination (a few
// samples each), signed in as a viewer, through the real API handler.
func dlqDashboard(ctx context.Context, s *scratch, o Options, st *store.Store, newest time.Time) (pageStats, error) {
	var out pageStats
	token, _, err := st.TokenCreate(ctx, "bench-viewer", converge.RoleViewer, converge.AuditEntry{Actor: "bench", Role: string(converge.RoleOperator)})
	if err != nil {
		return out, err
	}
	kinds := converge.KindPolicies{}
	for _, name := range []string{"build", "deploy", "test"} {
		kinds[name] = converge.KindPolicy{Name: name, MaxAttempts: config.DefaultMaxAttempts}
	}
	srv := api.New(api.Config{Store: st, Kinds: kinds, Logger: o.Logger})
	dash, err := ui.New(ui.Config{Store: st, Logger: o.Logger, Authenticate: srv.Authenticate, Kinds: kinds})
	if err != nil {
		return out, err
	}
	mux := chi.NewRouter()
	mux.Mount("/ui", dash.Handler())
	mux.Mount("/", srv)
	hs := httptest.NewServer(mux)
	defer hs.Close()
	secret, _, err := st.SessionCreate(ctx, store.SessionCreateParams{Actor: converge.Actor{Name: "bench-viewer", Role: converge.RoleViewer}, Token: token, TTL: time.Hour})
	if err != nil {
		return out, err
	}
	hc := hs.Client()
	var all []time.Duration
	samples := max(o.Samples/4, 3)
	for c := range 1 << len(dlqDims) {
		name, _ := dlqCombo(c, 0, newest)
		ds := make([]time.Duration, 0, samples)
		for i := range samples {
			_, f := dlqCombo(c, i, newest)
			q := url.Values{}
			for k, v := range map[string]string{"status": string(f.Status), "kind": f.Kind, "resource": f.Resource, "reason": string(f.Reason), "q": f.Q} {
				if v != "" {
					q.Set(k, v)
				}
			}
			if f.Since != nil {
				q.Set("since", f.Since.UTC().Format(time.RFC3339))
			}
			if f.Until != nil {
				q.Set("until", f.Until.UTC().Format(time.RFC3339))
			}
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, hs.URL+"/ui/dead-letters?"+q.Encode(), nil)
			if err != nil {
				return out, err
			}
			req.AddCookie(&http.Cookie{Name: "converge_session", Value: secret})
			t := time.Now()
			resp, err := hc.Do(req)
			if err != nil {
				return out, fmt.Errorf("dashboard %s: %w", name, err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			d := time.Since(t)
			if resp.StatusCode != http.StatusOK {
				return out, fmt.Errorf("dashboard %s: status %d", name, resp.StatusCode)
			}
			ds = append(ds, d)
		}
		all = append(all, ds...)
		if p := percentile(ds, 95); p >= out.worstP95 {
			out.worstP95, out.worst = p, name
		}
	}
	out.p50, out.p95 = percentile(all, 50), percentile(all, 95)
	return out, nil
}

// dlqGenerate fills converge_dead_letters with n rows shaped as
// docs/dead-letters.md describes them. The scratch database's dead
// letters lose their foreign keys (no events or runs are needed), and the
// table's secondary indexes are dropped during the load and built again
// afterwards, which is much faster than maintaining them row by row.
func dlqGenerate(ctx context.Context, pool *pgxpool.Pool, n int) error {
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT i.indexrelid::regclass::text, pg_get_indexdef(i.indexrelid)
			FROM pg_index i WHERE i.indrelid = 'converge_dead_letters'::regclass AND NOT i.indisprimary AND NOT i.indisunique`)
		if err != nil {
			return fmt.Errorf("read indexes: %w", err)
		}
		type index struct{ name, def string }
		idx, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (index, error) {
			var x index
			err := r.Scan(&x.name, &x.def)
			return x, err
		})
		if err != nil {
			return fmt.Errorf("read indexes: %w", err)
		}
		stmts := []string{
			`ALTER TABLE converge_dead_letters DROP CONSTRAINT IF EXISTS converge_dead_letters_event_id_fkey`,
			`ALTER TABLE converge_dead_letters DROP CONSTRAINT IF EXISTS converge_dead_letters_run_id_fkey`,
		}
		for _, x := range idx {
			stmts = append(stmts, `DROP INDEX `+x.name)
		}
		stmts = append(stmts, `SET LOCAL work_mem = '64MB'`, `SET LOCAL maintenance_work_mem = '256MB'`, dlqInsertSQL)
		for _, x := range idx {
			stmts = append(stmts, x.def)
		}
		for _, sql := range stmts {
			args := []any{}
			if sql == dlqInsertSQL {
				args = append(args, n)
			}
			if _, err := tx.Exec(ctx, sql, args...); err != nil {
				return fmt.Errorf("generate dead letters: %s: %w", strings.SplitN(sql, "\n", 2)[0], err)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	// Autovacuum may be off (it is on the machine of docs/benchmarks.md):
	// the planner needs statistics, index-only scans the visibility map.
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE converge_dead_letters`); err != nil {
		return fmt.Errorf("vacuum dead letters: %w", err)
	}
	return nil
}

// dlqInsertSQL inserts $1 generated dead letters; `converge bench dlq --keep`
// leaves them in a scratch database for EXPLAIN (test/dlq TestExplainAtScale).
const dlqInsertSQL = `INSERT INTO converge_dead_letters (id, event_id, run_id, kind, resource, version, reason, attempts,
                                   error, errors, error_text, payload, status, created_at, resolved_at, resolved_by,
                                   superseded_by_version)
SELECT encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid())
              PLACING substring(int8send((extract(epoch FROM created_at) * 1000)::bigint) FROM 3) FROM 1 FOR 6),
              52, 1), 53, 1), 'hex')::uuid,
       gen_random_uuid(), gen_random_uuid(),
       kind, resource, g, reason, attempts,
       jsonb_build_object('class', CASE WHEN reason = 'permanent_error' THEN 'permanent' ELSE 'transient' END, 'message', msg),
       jsonb_build_array(jsonb_build_object('class', 'transient', 'message', msg),
                         jsonb_build_object('class', 'transient', 'message', msg)),
       msg,
       jsonb_build_object('commit', md5(g::text), 'image', resource),
       status, created_at,
       CASE WHEN status <> 'open' THEN created_at + interval '1 hour' END,
       CASE WHEN status IN ('redriven', 'discarded') THEN 'oncall' WHEN status = 'superseded' THEN 'converge' END,
       CASE WHEN status = 'superseded' THEN g + 1 END
  FROM (
    SELECT g, created_at,
           CASE WHEN r_status < 0.25 THEN 'open' WHEN r_status < 0.50 THEN 'redriven'
                WHEN r_status < 0.85 THEN 'discarded' ELSE 'superseded' END AS status,
           CASE WHEN r_kind < 0.60 THEN 'build' WHEN r_kind < 0.95 THEN 'deploy' ELSE 'test' END AS kind,
           CASE WHEN r_res < 0.5 THEN 'app/' WHEN r_res < 0.8 THEN 'staging/' ELSE 'prod/' END
             || 'svc-' || lpad((floor(power(random(), 2) * 20000))::int::text, 5, '0') AS resource,
           CASE WHEN r_reason < 0.85 THEN 'attempts_exhausted' ELSE 'permanent_error' END AS reason,
           CASE WHEN r_reason < 0.85 THEN 10 ELSE 1 END AS attempts,
           CASE WHEN r_err < 0.30 THEN 'http status 503: upstream connect error or disconnect/reset before headers (' || substr(md5(g::text), 1, 8) || ')'
                WHEN r_err < 0.55 THEN 'dial tcp 10.0.' || (g % 250) || '.' || (g % 97) || ':443: connect: connection refused'
                WHEN r_err < 0.75 THEN 'http status 500: internal server error, trace id ' || md5(g::text)
                WHEN r_err < 0.90 THEN 'context deadline exceeded (timeout after 30s)'
                WHEN r_err < 0.999 THEN 'exit status 2: manifest invalid: field ' || substr(md5(g::text), 1, 6) || ' is not allowed'
                ELSE 'x509: certificate has expired or is not yet valid: current time is after ' || to_char(created_at, 'YYYY-MM-DD') END AS msg
      FROM (SELECT g, now() - (random() * interval '90 days') AS created_at,
                   random() AS r_status, random() AS r_kind, random() AS r_res, random() AS r_reason, random() AS r_err
              FROM generate_series(1, $1::int) AS g) AS gen
  ) AS t`
