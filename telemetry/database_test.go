package telemetry_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/converge-run/converge/telemetry"
	"github.com/converge-run/converge/test/pgtest"
)

// exec runs sql on pool, failing the test on error.
func exec(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	if _, err := pool.Exec(t.Context(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// insertRuns inserts n events of kind, each with one run in status (and an
// open dead letter when status is failed), on resources prefix-1..n.
func insertRuns(t *testing.T, pool *pgxpool.Pool, kind, prefix, status string, n int) {
	t.Helper()
	exec(t, pool, `
		WITH ev AS (
			INSERT INTO converge_events (id, kind, resource, version, payload)
			SELECT gen_random_uuid(), $1, $2 || '-' || i, 1, '{}' FROM generate_series(1, $4::int) i
			RETURNING id, kind, resource, version),
		run AS (
			INSERT INTO converge_runs (id, event_id, number, kind, resource, version, status, max_attempts, finished_at, hold)
			SELECT gen_random_uuid(), id, 1, kind, resource, version, $3, 3,
			       CASE WHEN $3 IN ('succeeded', 'failed', 'superseded', 'cancelled') THEN now() END,
			       CASE WHEN $3 = 'held' THEN ARRAY['approval'] ELSE '{}'::text[] END
			  FROM ev
			RETURNING id, event_id, kind, resource, version)
		INSERT INTO converge_dead_letters (id, event_id, run_id, kind, resource, version, reason, attempts, payload)
		SELECT gen_random_uuid(), event_id, id, kind, resource, version, 'attempts_exhausted', 3, '{}'
		  FROM run WHERE $3 = 'failed'`, kind, prefix, status, n)
}

// dbCollector registers a DatabaseCollector for kinds build and deploy on
// a new registry.
func dbCollector(t *testing.T, pool *pgxpool.Pool) *prometheus.Registry {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(telemetry.NewDatabaseCollector(pool, telemetry.DatabaseCollectorParams{Kinds: []string{"build", "deploy"}}))
	return reg
}

func TestDatabaseCollectorEmptyDatabase(t *testing.T) {
	t.Parallel()
	pool := pgtest.OpenPool(t, pgtest.NewDatabase(t), 2)
	got := scrape(t, dbCollector(t, pool))
	for _, kind := range []string{"build", "deploy"} {
		for _, st := range telemetry.RunStatuses {
			if v, ok := got.value("converge_runs", "kind", kind, "status", st); !ok || v != 0 {
				t.Errorf("converge_runs{kind=%s,status=%s} = %v (exported: %v), want 0", kind, st, v, ok)
			}
		}
		for _, name := range []string{"converge_dead_letters_open", "converge_streams_quarantined"} {
			if v, ok := got.value(name, "kind", kind); !ok || v != 0 {
				t.Errorf("%s{kind=%s} = %v (exported: %v), want 0", name, kind, v, ok)
			}
		}
	}
	if n := len(got.series("converge_runs")); n != 2*len(telemetry.RunStatuses) {
		t.Errorf("converge_runs has %d series, want %d", n, 2*len(telemetry.RunStatuses))
	}
	if v, ok := got.value("converge_scrape_errors_total"); !ok || v != 0 {
		t.Errorf("converge_scrape_errors_total = %v (exported: %v), want 0", v, ok)
	}
}

func TestDatabaseCollectorCounts(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	pool := pgtest.OpenPool(t, url, 2)
	insertRuns(t, pool, "build", "app/q", "queued", 3)
	insertRuns(t, pool, "build", "app/r", "running", 2)
	insertRuns(t, pool, "deploy", "prod/t", "retrying", 1)
	insertRuns(t, pool, "build", "app/f", "failed", 4)
	insertRuns(t, pool, "deploy", "prod/f", "failed", 2)
	insertRuns(t, pool, "build", "app/s", "succeeded", 5) // terminal: from the counts
	insertRuns(t, pool, "lint", "app/q", "queued", 1)     // not configured: unknown
	insertRuns(t, pool, "lint", "app/f", "failed", 2)
	// Resolved dead letters are not open.
	exec(t, pool, `UPDATE converge_dead_letters SET status = 'discarded', resolved_at = now() WHERE resource = 'app/f-4' AND kind = 'build'`)

	reg := dbCollector(t, pool)
	got := scrape(t, reg)
	tests := []struct {
		name   string
		labels []string
		want   float64
	}{
		{"converge_runs", []string{"kind", "build", "status", "queued"}, 3},
		{"converge_runs", []string{"kind", "build", "status", "running"}, 2},
		{"converge_runs", []string{"kind", "build", "status", "retrying"}, 0},
		{"converge_runs", []string{"kind", "build", "status", "held"}, 0},
		{"converge_runs", []string{"kind", "deploy", "status", "retrying"}, 1},
		{"converge_runs", []string{"kind", "deploy", "status", "queued"}, 0},
		{"converge_runs", []string{"kind", "unknown", "status", "queued"}, 1},
		{"converge_runs", []string{"kind", "build", "status", "succeeded"}, 5},
		{"converge_runs", []string{"kind", "build", "status", "failed"}, 4},
		{"converge_runs", []string{"kind", "deploy", "status", "failed"}, 2},
		{"converge_runs", []string{"kind", "deploy", "status", "succeeded"}, 0},
		{"converge_runs", []string{"kind", "unknown", "status", "failed"}, 2},
		{"converge_runs", []string{"kind", "build", "status", "cancelled"}, 0},
		{"converge_dead_letters_open", []string{"kind", "build"}, 3},
		{"converge_dead_letters_open", []string{"kind", "deploy"}, 2},
		{"converge_dead_letters_open", []string{"kind", "unknown"}, 2},
		{"converge_streams_quarantined", []string{"kind", "build"}, 0},
		{"converge_streams_quarantined", []string{"kind", "unknown"}, 0},
	}
	for _, tt := range tests {
		if v, ok := got.value(tt.name, tt.labels...); !ok || v != tt.want {
			t.Errorf("%s%v = %v (exported: %v), want %v", tt.name, tt.labels, v, ok, tt.want)
		}
	}
	if n := len(got.series("converge_runs")); n != 3*len(telemetry.RunStatuses) {
		t.Errorf("converge_runs has %d series, want %d (build, deploy, unknown × every status)", n, 3*len(telemetry.RunStatuses))
	}

	// Identical from every process: another collector, on a pool of its
	// own, reads the same.
	again := scrape(t, dbCollector(t, pgtest.OpenPool(t, url, 1)))
	for _, tt := range tests {
		if v, _ := again.value(tt.name, tt.labels...); v != tt.want {
			t.Errorf("second collector: %s%v = %v, want %v", tt.name, tt.labels, v, tt.want)
		}
	}
}

func TestDatabaseCollectorLaterSchema(t *testing.T) {
	t.Parallel()
	pool := pgtest.OpenPool(t, pgtest.NewDatabase(t), 2)
	// The schema of held work (migration 000009): streams' quarantined_at,
	// and held runs in the one-active index, as unfinished runs.
	exec(t, pool, `INSERT INTO converge_streams (kind, resource, latest_version, quarantined_at)
		VALUES ('build', 'app/a', 1, now()), ('build', 'app/b', 1, now()), ('build', 'app/c', 1, NULL), ('deploy', 'prod/a', 1, now())`)
	insertRuns(t, pool, "deploy", "prod/h", "held", 2)

	got := scrape(t, dbCollector(t, pool))
	tests := []struct {
		name   string
		labels []string
		want   float64
	}{
		{"converge_streams_quarantined", []string{"kind", "build"}, 2},
		{"converge_streams_quarantined", []string{"kind", "deploy"}, 1},
		{"converge_runs", []string{"kind", "deploy", "status", "held"}, 2},
	}
	for _, tt := range tests {
		if v, ok := got.value(tt.name, tt.labels...); !ok || v != tt.want {
			t.Errorf("%s%v = %v (exported: %v), want %v", tt.name, tt.labels, v, ok, tt.want)
		}
	}
}

func TestDatabaseCollectorKeepsLastValuesOnError(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	insertRuns(t, pool, "build", "app/f", "failed", 2)
	reg := dbCollector(t, pool)
	if v, _ := scrape(t, reg).value("converge_dead_letters_open", "kind", "build"); v != 2 {
		t.Fatalf("converge_dead_letters_open{kind=build} = %v, want 2", v)
	}
	pool.Close()
	got := scrape(t, reg)
	if v, _ := got.value("converge_dead_letters_open", "kind", "build"); v != 2 {
		t.Errorf("after a failed scrape converge_dead_letters_open{kind=build} = %v, want the last value 2", v)
	}
	if v, _ := got.value("converge_scrape_errors_total"); v != 1 {
		t.Errorf("converge_scrape_errors_total = %v, want 1", v)
	}
}

// TestScrapeCost fills a database with failed runs and their open dead
// letters (20,000, or TELEMETRY_SCRAPE_ROWS), and converge_run_counts with
// rows not compacted yet (20,000 deltas netting to 0, or
// TELEMETRY_SCRAPE_DELTAS: what the finishing statements of the interval
// between two compactions insert), and times the scrape query; it fails
// over 50 ms.
// The measurement of docs/benchmarks.md:
//
//	TEST_REQUIRE_DB=1 TELEMETRY_SCRAPE_ROWS=1000000 TELEMETRY_SCRAPE_DELTAS=100000 go test -count=1 -run TestScrapeCost -v -timeout 30m ./telemetry/
func TestScrapeCost(t *testing.T) {
	if testing.Short() {
		t.Skip("fills a database; not with -short")
	}
	rows := 20_000
	if s := os.Getenv("TELEMETRY_SCRAPE_ROWS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("TELEMETRY_SCRAPE_ROWS=%q is not a positive number", s)
		}
		rows = n
	}
	deltas := 20_000
	if s := os.Getenv("TELEMETRY_SCRAPE_DELTAS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			t.Fatalf("TELEMETRY_SCRAPE_DELTAS=%q is not a number", s)
		}
		deltas = n
	}
	pool := pgtest.OpenPool(t, pgtest.NewDatabase(t), 2)
	ctx := context.WithoutCancel(t.Context())
	// Half build, half deploy; a backlog of 1,000 queued runs besides.
	start := time.Now()
	for _, kind := range []string{"build", "deploy"} {
		for done := 0; done < rows/2; done += 100_000 {
			insertRuns(t, pool, kind, fmt.Sprintf("app/%d", done), "failed", min(100_000, rows/2-done))
		}
	}
	insertRuns(t, pool, "build", "app/backlog", "queued", 1000)
	// Deltas of both kinds and four statuses, +1 and -1 by turns.
	exec(t, pool, `INSERT INTO converge_run_counts (kind, status, n)
		SELECT (ARRAY['build', 'deploy'])[i % 2 + 1], (ARRAY['succeeded', 'failed', 'superseded', 'cancelled'])[i / 2 % 4 + 1],
		       CASE WHEN i / 8 % 2 = 0 THEN 1 ELSE -1 END
		  FROM generate_series(0, $1::int - 1) i`, deltas/16*16)
	exec(t, pool, `VACUUM ANALYZE converge_events, converge_runs, converge_dead_letters, converge_streams, converge_run_counts`)
	t.Logf("filled %d open dead letters and %d count rows in %v", rows, deltas/16*16, time.Since(start).Round(time.Millisecond))

	reg := dbCollector(t, pool)
	scrape(t, reg) // warm the cache and detect the schema
	const tries = 7
	var took []time.Duration
	for range tries {
		t0 := time.Now()
		got := scrape(t, reg)
		took = append(took, time.Since(t0))
		if v, _ := got.value("converge_dead_letters_open", "kind", "build"); v != float64(rows/2) {
			t.Fatalf("converge_dead_letters_open{kind=build} = %v, want %d", v, rows/2)
		}
		if v, _ := got.value("converge_runs", "kind", "deploy", "status", "failed"); v != float64(rows/2) {
			t.Fatalf("converge_runs{kind=deploy,status=failed} = %v, want %d", v, rows/2)
		}
	}
	median := sortedMedian(took)
	var plan string
	rowsPlan, err := pool.Query(ctx, `EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) `+telemetry.ScrapeSQLForTest())
	if err == nil {
		for rowsPlan.Next() {
			var line string
			_ = rowsPlan.Scan(&line)
			plan += line + "\n"
		}
		rowsPlan.Close()
	}
	t.Logf("scrape at %d open dead letters and %d count rows: median %v of %d (all: %v)\n%s", rows, deltas/16*16, median, tries, took, plan)
	if median > 50*time.Millisecond {
		t.Errorf("scrape takes %v at %d open dead letters and %d count rows, want under 50ms", median, rows, deltas/16*16)
	}
}

// sortedMedian is the median of ds.
func sortedMedian(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// TestDeadLetterCounts checks that the counts of migration 000007, which
// converge_dead_letters_open reads, follow every change of the rows: a
// dead letter written, resolved, reopened, deleted, and the table
// truncated.
func TestDeadLetterCounts(t *testing.T) {
	t.Parallel()
	pool := pgtest.OpenPool(t, pgtest.NewDatabase(t), 2)
	reg := dbCollector(t, pool)
	check := func(step string, build, deploy float64) {
		t.Helper()
		got := scrape(t, reg)
		for kind, want := range map[string]float64{"build": build, "deploy": deploy} {
			if v, _ := got.value("converge_dead_letters_open", "kind", kind); v != want {
				t.Errorf("%s: converge_dead_letters_open{kind=%s} = %v, want %v", step, kind, v, want)
			}
		}
		var drift int64
		if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM (
				SELECT kind, count(*) AS n FROM converge_dead_letters WHERE status = 'open' GROUP BY kind) d
				FULL JOIN (SELECT kind, open AS n FROM converge_dead_letter_counts WHERE open <> 0) c USING (kind)
				WHERE d.n IS DISTINCT FROM c.n`).Scan(&drift); err != nil {
			t.Fatal(err)
		}
		if drift != 0 {
			t.Errorf("%s: converge_dead_letter_counts differs from the rows for %d kinds", step, drift)
		}
	}
	check("empty", 0, 0)
	insertRuns(t, pool, "build", "app", "failed", 5)
	insertRuns(t, pool, "deploy", "app", "failed", 2)
	check("inserted", 5, 2)
	exec(t, pool, `UPDATE converge_dead_letters SET status = 'redriven' WHERE kind = 'build' AND resource IN ('app-1', 'app-2')`)
	exec(t, pool, `UPDATE converge_dead_letters SET error_text = 'x' WHERE kind = 'deploy'`)
	check("two redriven, one untouched column changed", 3, 2)
	exec(t, pool, `UPDATE converge_dead_letters SET status = CASE WHEN status = 'open' THEN 'discarded' ELSE 'open' END WHERE kind = 'build'`)
	check("reopened two, discarded three in one statement", 2, 2)
	exec(t, pool, `DELETE FROM converge_dead_letters WHERE kind = 'deploy' AND resource = 'app-1'`)
	exec(t, pool, `DELETE FROM converge_dead_letters WHERE kind = 'build' AND status = 'discarded'`)
	check("deleted", 2, 1)
	exec(t, pool, `UPDATE converge_dead_letters SET status = 'superseded' WHERE false`)
	check("a statement that changes nothing", 2, 1)
	exec(t, pool, `TRUNCATE converge_dead_letters`)
	check("truncated", 0, 0)
}
