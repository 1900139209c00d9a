package telemetry_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
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
	// Compaction folds the deltas into one row per (kind, status) and
	// changes no count.
	if _, err := f.st.RunCountsCompact(t.Context()); err != nil {
		t.Fatal(err)
	}
	var rows, pairs int
	if err := pool.QueryRow(t.Context(), `SELECT count(*), count(DISTINCT (kind, status)) FROM converge_run_counts`).Scan(&rows, &pairs); err != nil {
		t.Fatal(err)
	}
	if rows != pairs {
		t.Errorf("after compaction: %d count rows for %d (kind, status) pairs", rows, pairs)
	}
	f.check("compacted", 11-int(res.Deleted["runs"]))

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

// TestRunCountsCompactExact compacts the run counts over and over, two
// compactions at a time, while four connections end runs of two kinds in
// small statements (each inserting its deltas), and checks on snapshots
// taken meanwhile that the counts summed are the terminal rows exactly,
// at every moment; once the writers stop, a compaction leaves one row per
// (kind, status).
func TestRunCountsCompactExact(t *testing.T) {
	t.Parallel()
	pool := pgtest.OpenPool(t, pgtest.NewDatabase(t), 12)
	st := store.New(pool, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	goErr := func(fn func() error) {
		wg.Go(func() {
			if err := fn(); err != nil {
				errs <- err
			}
		})
	}
	var written, folded atomic.Int64
	for w := range 4 {
		goErr(func() error {
			for i := 0; ctx.Err() == nil; i++ {
				kind := []string{"build", "deploy"}[(w+i)%2]
				status := []string{"succeeded", "failed", "cancelled"}[i%3]
				// Each writer ends only the runs it inserted: two writers
				// ending each other's runs too would lock them in two
				// orders (a deadlock of the test's own making).
				var ids []uuid.UUID
				rows, err := pool.Query(ctx, `
					WITH ev AS (
						INSERT INTO converge_events (id, kind, resource, version, payload)
						SELECT gen_random_uuid(), $1, 'app/' || gen_random_uuid(), 1, '{}' FROM generate_series(1, 2)
						RETURNING id, kind, resource, version)
					INSERT INTO converge_runs (id, event_id, number, kind, resource, version, status, max_attempts)
					SELECT id, id, 1, kind, resource, version, 'queued', 3 FROM ev RETURNING id`, kind)
				if err == nil {
					ids, err = pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
				}
				if err == nil {
					_, err = pool.Exec(ctx, `UPDATE converge_runs SET status = $2, finished_at = now()
						WHERE id = ANY($1)`, ids, status)
				}
				if ctx.Err() != nil {
					return nil
				}
				if err != nil {
					return err
				}
				written.Add(1)
			}
			return nil
		})
	}
	for range 2 {
		goErr(func() error {
			for ctx.Err() == nil {
				n, err := st.RunCountsCompact(ctx)
				if ctx.Err() != nil {
					return nil
				}
				if err != nil {
					return err
				}
				folded.Add(n)
			}
			return nil
		})
	}
	// drift is how many (kind, status) pairs a snapshot's counts give
	// another number of terminal runs than its rows.
	drift := func(ctx context.Context) (int, error) {
		var n int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM (
				SELECT kind, status, count(*) AS n FROM converge_runs WHERE finished_at IS NOT NULL GROUP BY kind, status) r
				FULL JOIN (SELECT kind, status, sum(n) AS n FROM converge_run_counts GROUP BY kind, status HAVING sum(n) <> 0) c
				USING (kind, status) WHERE r.n IS DISTINCT FROM c.n`).Scan(&n)
		return n, err
	}
	checks := 0
	for ctx.Err() == nil {
		d, err := drift(ctx)
		if ctx.Err() != nil {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		checks++
		if d != 0 {
			t.Errorf("check %d: the counts differ from the rows for %d (kind, status) pairs", checks, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("%d statements ended runs, compactions folded %d rows, %d checks", written.Load(), folded.Load(), checks)
	if written.Load() < 20 || folded.Load() == 0 || checks < 10 {
		t.Fatalf("too little happened: %d statements, %d rows folded, %d checks", written.Load(), folded.Load(), checks)
	}
	// A compaction cancelled above may hold the lock a moment longer, on
	// a connection that is closing: then this one skips, and is made
	// again.
	var rows int
	for try := 0; ; try++ {
		if _, err := st.RunCountsCompact(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM converge_run_counts`).Scan(&rows); err != nil {
			t.Fatal(err)
		}
		if rows <= 2*3 || try == 50 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if d, err := drift(t.Context()); err != nil || d != 0 {
		t.Errorf("after the last compaction: %d pairs differ (%v)", d, err)
	}
	if rows > 2*3 {
		t.Errorf("%d count rows after the last compaction, want at most 6 (one per kind and status)", rows)
	}
}
