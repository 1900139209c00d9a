package telemetry_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/store"
	"github.com/converge-run/converge/telemetry"
	"github.com/converge-run/converge/test/pgtest"
)

// runCountsFixture drives runs through the store (the paths converge
// itself takes) and compares converge_runs with the rows.
type runCountsFixture struct {
	t    *testing.T
	pool *pgxpool.Pool
	st   *store.Store
	reg  *prometheus.Registry
}

// accept accepts (kind, resource, version) and returns its run.
func (f *runCountsFixture) accept(kind, resource string, version int64) *converge.Run {
	f.t.Helper()
	res, err := f.st.EventAccept(f.t.Context(), store.EventAcceptParams{
		EventSubmission: converge.EventSubmission{Kind: kind, Resource: resource, Version: version, Payload: json.RawMessage(`{}`)},
		MaxAttempts:     3,
	})
	if err != nil {
		f.t.Fatalf("accept %s %s@%d: %v", kind, resource, version, err)
	}
	return res.Run
}

// attempt begins an attempt of each run and finishes them all in one
// batch (one statement for the successes), with err (nil: success).
func (f *runCountsFixture) attempt(runs []*converge.Run, err *converge.Error) {
	f.t.Helper()
	ctx := f.t.Context()
	begins := make([]store.AttemptBeginParams, len(runs))
	for i, r := range runs {
		var job int64
		if err := f.pool.QueryRow(ctx, `SELECT job_id FROM converge_runs WHERE id = $1`, r.ID).Scan(&job); err != nil {
			f.t.Fatal(err)
		}
		begins[i] = store.AttemptBeginParams{RunID: r.ID, JobID: job, LeaseTTL: time.Minute}
	}
	tickets, berr := f.st.AttemptBeginMany(ctx, begins)
	if berr != nil {
		f.t.Fatalf("begin: %v", berr)
	}
	finishes := make([]store.AttemptFinishParams, len(runs))
	for i, tk := range tickets {
		if tk == nil || tk.Decision != converge.DecisionCall {
			f.t.Fatalf("begin %d: %+v", i, tk)
		}
		finishes[i] = store.AttemptFinishParams{Run: tk.Run, JobID: begins[i].JobID, Attempt: tk.Attempt, Started: time.Now(),
			Err: err, Output: json.RawMessage(`{}`)}
	}
	if _, ferr := f.st.AttemptFinishMany(ctx, finishes); ferr != nil {
		f.t.Fatalf("finish: %v", ferr)
	}
}

// check fails the test unless every converge_runs series equals the count
// of the rows of its kind and status (kinds other than build and deploy
// under unknown), and unless it saw want terminal runs in all.
func (f *runCountsFixture) check(step string, want int) {
	f.t.Helper()
	rows, err := f.pool.Query(f.t.Context(), `SELECT CASE WHEN kind IN ('build', 'deploy') THEN kind ELSE 'unknown' END,
		status, count(*) FROM converge_runs GROUP BY 1, 2`)
	if err != nil {
		f.t.Fatal(err)
	}
	rowCounts := map[[2]string]float64{}
	for rows.Next() {
		var kind, status string
		var n int64
		if err := rows.Scan(&kind, &status, &n); err != nil {
			f.t.Fatal(err)
		}
		rowCounts[[2]string{kind, status}] = float64(n)
	}
	if err := rows.Err(); err != nil {
		f.t.Fatal(err)
	}
	got := scrape(f.t, f.reg)
	terminal := 0.0
	for _, kind := range []string{"build", "deploy", "unknown"} {
		for _, st := range telemetry.RunStatuses {
			v, ok := got.value("converge_runs", "kind", kind, "status", st)
			if kind != "unknown" && !ok {
				f.t.Errorf("%s: converge_runs{kind=%s,status=%s} not exported", step, kind, st)
			}
			if w := rowCounts[[2]string{kind, st}]; v != w {
				f.t.Errorf("%s: converge_runs{kind=%s,status=%s} = %v, the rows count %v", step, kind, st, v, w)
			}
			if converge.RunStatus(st).Terminal() {
				terminal += v
			}
		}
	}
	if terminal != float64(want) {
		f.t.Errorf("%s: %v terminal runs exported, want %d", step, terminal, want)
	}
}

// TestRunCountsFollowRuns checks converge_runs, terminal statuses included,
// against count(*) of the rows after each way a run ends or goes: a
// success (one and a batch), a failure, a supersession, an operator's
// cancel, retention, and changes that must not move the counts.
func TestRunCountsFollowRuns(t *testing.T) {
	t.Parallel()
	pool := pgtest.OpenPool(t, pgtest.NewDatabase(t), 4)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		t.Fatalf("river client: %v", err)
	}
	f := &runCountsFixture{t: t, pool: pool, st: store.New(pool, client), reg: dbCollector(t, pool)}
	f.check("empty", 0)

	f.attempt([]*converge.Run{f.accept("build", "app/a", 1)}, nil)
	f.check("one success", 1)

	var batch []*converge.Run
	for i := range 5 {
		batch = append(batch, f.accept("deploy", fmt.Sprintf("prod/%d", i), 1))
	}
	batch = append(batch, f.accept("lint", "app/a", 1))
	f.attempt(batch, nil)
	f.check("a batch of six successes, one of a kind not configured", 7)

	failing := f.accept("build", "app/b", 1)
	f.attempt([]*converge.Run{failing}, &converge.Error{Class: converge.ClassPermanent, Message: "no"})
	f.check("a permanent failure", 8)

	retried := f.accept("build", "app/r", 1)
	f.attempt([]*converge.Run{retried}, &converge.Error{Class: converge.ClassTransient, Message: "later"})
	f.check("a transient failure: retrying", 8)

	f.accept("build", "app/r", 2) // supersedes the retrying run
	f.accept("build", "app/a", 2)
	f.accept("build", "app/a", 3) // supersedes version 2, queued
	f.check("two supersessions", 10)

	queued := f.accept("deploy", "prod/x", 1)
	if _, err := f.st.RunCancel(t.Context(), queued.ID, converge.AuditEntry{Actor: "test", Role: "operator"}); err != nil {
		t.Fatal(err)
	}
	f.check("an operator's cancel", 11)

	// Changes that end no run: a terminal run's other columns, an update
	// of no row, G6's refusal of a status change.
	exec(t, pool, `UPDATE converge_runs SET hold = '{approval}' WHERE status = 'superseded'`)
	exec(t, pool, `UPDATE converge_runs SET status = 'cancelled', finished_at = now() WHERE false`)
	if _, err := pool.Exec(t.Context(), `UPDATE converge_runs SET status = 'failed' WHERE status = 'succeeded'`); err == nil {
		t.Fatal("a terminal run's status changed")
	}
	f.check("changes that end no run", 11)

	// Retention, far in the future: every event but each stream's latest
	// and applied goes, with its runs.
	res, err := f.st.Prune(t.Context(), store.PruneParams{
		Retention: converge.Retention{Runs: time.Hour, DeadLetters: time.Hour, WorkflowRuns: time.Hour, Deliveries: time.Hour, Audit: time.Hour},
		Now:       time.Now().Add(48 * time.Hour),
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Deleted["runs"] == 0 {
		t.Fatalf("retention deleted no run: %+v", res)
	}
	f.check(fmt.Sprintf("retention deleted %d runs", res.Deleted["runs"]), 11-int(res.Deleted["runs"]))
	// Retention subtracts in a shard of its own, which no finish writes.
	var pruned int64
	if err := pool.QueryRow(t.Context(), `SELECT coalesce(-sum(n), 0) FROM converge_run_counts WHERE shard = 16`).Scan(&pruned); err != nil {
		t.Fatal(err)
	}
	if pruned != res.Deleted["runs"] {
		t.Errorf("shard 16 has %d runs taken out, retention deleted %d", pruned, res.Deleted["runs"])
	}

	// A terminal run inserted as such (a restore), then the table emptied.
	var ev uuid.UUID
	if err := pool.QueryRow(t.Context(), `INSERT INTO converge_events (id, kind, resource, version, payload)
		VALUES (gen_random_uuid(), 'deploy', 'prod/old', 1, '{}') RETURNING id`).Scan(&ev); err != nil {
		t.Fatal(err)
	}
	exec(t, pool, `INSERT INTO converge_runs (id, event_id, number, kind, resource, version, status, max_attempts, finished_at)
		VALUES (gen_random_uuid(), $1, 1, 'deploy', 'prod/old', 1, 'cancelled', 3, now())`, ev)
	f.check("a terminal run inserted", 12-int(res.Deleted["runs"]))
	exec(t, pool, `TRUNCATE converge_dead_letters, converge_attempts, converge_runs CASCADE`)
	f.check("truncated", 0)
}

// TestRunCountsShards checks that the counts of one kind and status are
// summed over the shards: connections of different backends add to rows
// of their own.
func TestRunCountsShards(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	reg := dbCollector(t, pgtest.OpenPool(t, url, 1))
	for i := range 3 {
		// A pool of one connection each, so three backends.
		pool := pgtest.OpenPool(t, url, 1)
		insertRuns(t, pool, "build", fmt.Sprintf("app/%d", i), "succeeded", 2)
	}
	got := scrape(t, reg)
	if v, _ := got.value("converge_runs", "kind", "build", "status", "succeeded"); v != 6 {
		t.Errorf("converge_runs{kind=build,status=succeeded} = %v, want 6", v)
	}
	var shards int
	if err := pgtest.OpenPool(t, url, 1).QueryRow(t.Context(),
		`SELECT count(*) FROM converge_run_counts WHERE kind = 'build' AND status = 'succeeded'`).Scan(&shards); err != nil {
		t.Fatal(err)
	}
	if shards < 1 || shards > 3 {
		t.Errorf("%d count rows for build succeeded, want 1 to 3 (one per shard written)", shards)
	}
}
