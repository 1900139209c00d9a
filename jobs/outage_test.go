package jobs_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/jobs"
	"github.com/converge-run/converge/store"
	"github.com/converge-run/converge/telemetry"
	"github.com/converge-run/converge/test/pgtest"
	"github.com/converge-run/converge/test/testkit"
)

// TestReconcileAfterOutage: the quick pass after an outage gives a fresh
// job to a queued run whose job River has had running since before the
// outage began, which the periodic pass leaves for four intervals, and
// leaves a job attempted after that moment alone; the run keeps its
// status, and its old job is no longer its job.
func TestReconcileAfterOutage(t *testing.T) {
	t.Parallel()
	st, pool := newBatchStore(t)
	ctx := t.Context()
	// Two queued runs whose jobs a worker fetched, 20 s and 2 s ago, and
	// none will finish (no River client runs here).
	ages := map[string]int{"outage/before": 20, "outage/after": 2}
	runs := map[string]*converge.Run{}
	jobIDs := map[string]int64{}
	for resource, age := range ages {
		res, err := accept(t, st, "deploy", resource, 1, `{}`)
		if err != nil {
			t.Fatal(err)
		}
		runs[resource], jobIDs[resource] = res.Run, runJobID(t, pool, res.Run.ID)
		if _, err := pool.Exec(ctx, `UPDATE river_job SET state = 'running', attempt = 1, attempted_by = ARRAY['gone'],
			attempted_at = now() - $2 * interval '1 second' WHERE id = $1`, jobIDs[resource], age); err != nil {
			t.Fatal(err)
		}
	}
	r := jobs.NewReconciler(st.Store, 15*time.Second, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if n := r.RunOnce(ctx); n != 0 {
		t.Fatalf("periodic pass rescued %d runs, want 0 (stuck only after 60 s)", n)
	}
	// The outage began 10 s ago.
	n, err := r.RunOnceAfterOutage(ctx, time.Now().Add(-10*time.Second))
	if err != nil || n != 1 {
		t.Fatalf("quick pass: rescued %d, %v; want 1", n, err)
	}
	for resource := range ages {
		var status converge.RunStatus
		var job int64
		if err := pool.QueryRow(ctx, `SELECT status, job_id FROM converge_runs WHERE id = $1`, runs[resource].ID).Scan(&status, &job); err != nil {
			t.Fatal(err)
		}
		rescued := resource == "outage/before"
		if status != converge.RunQueued || (job != jobIDs[resource]) == !rescued {
			t.Errorf("%s: status %s, job %d (was %d); want queued and a fresh job %v", resource, status, job, jobIDs[resource], rescued)
		}
	}
	// A second quick pass finds nothing more.
	if n, err := r.RunOnceAfterOutage(ctx, time.Now().Add(-10*time.Second)); err != nil || n != 0 {
		t.Errorf("second quick pass: rescued %d, %v; want 0", n, err)
	}
}

// TestReconcileAfterOutageMoreThanAList: a crash that strands more runs
// than one pass lists (store.RunStrandedListMax) has them all rescued by
// one quick pass, and every old job is asked to cancel (River marks a
// running job's cancel attempt and leaves its state to its worker).
func TestReconcileAfterOutageMoreThanAList(t *testing.T) {
	t.Parallel()
	st, pool := newBatchStore(t)
	ctx := t.Context()
	n := store.RunStrandedListMax + 20
	params := make([]store.EventAcceptParams, n)
	for i := range params {
		params[i] = store.EventAcceptParams{EventSubmission: converge.EventSubmission{Kind: "deploy",
			Resource: fmt.Sprintf("outage/many-%d", i), Version: 1, Payload: json.RawMessage(`{}`)}, MaxAttempts: 3}
	}
	if _, errs, err := st.EventAcceptMany(ctx, params); err != nil {
		t.Fatal(err)
	} else if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	var old []int64
	rows, err := pool.Query(ctx, `UPDATE river_job j SET state = 'running', attempt = 1, attempted_by = ARRAY['gone'],
		attempted_at = now() - interval '20 seconds' FROM converge_runs r WHERE r.job_id = j.id AND r.resource LIKE 'outage/many-%'
		RETURNING j.id`)
	if err != nil {
		t.Fatal(err)
	}
	if old, err = pgx.CollectRows(rows, pgx.RowTo[int64]); err != nil || len(old) != n {
		t.Fatalf("stranded %d jobs (%v), want %d", len(old), err, n)
	}
	r := jobs.NewReconciler(st.Store, 15*time.Second, slog.New(slog.NewTextHandler(io.Discard, nil)))
	rescued, err := r.RunOnceAfterOutage(ctx, time.Now().Add(-10*time.Second))
	if err != nil || rescued != n {
		t.Fatalf("quick pass: rescued %d, %v; want %d", rescued, err, n)
	}
	var cancelled, pointing int
	if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'cancelled' OR metadata ? 'cancel_attempted_at'),
			(SELECT count(*) FROM converge_runs WHERE job_id = ANY($1))
		FROM river_job WHERE id = ANY($1)`, old).Scan(&cancelled, &pointing); err != nil {
		t.Fatal(err)
	}
	if cancelled != n || pointing != 0 {
		t.Errorf("old jobs: %d cancelled or asked to, %d still a run's job; want %d and 0", cancelled, pointing, n)
	}
}

// TestWorkerLastPollStopsWhileFetchesFail: an idle worker sets
// converge_worker_last_poll_timestamp_seconds at each of River's fetch
// polls, and only when the fetch got an answer: while its fetches cannot
// complete (river_job locked, as a database outage or a read-only primary
// keeps them from succeeding) the gauge stays where it was, so that the
// "no worker polling" alert can fire (SPEC §14); it moves again once they
// do. (It was set by a ticker whatever the fetches did.)
func TestWorkerLastPollStopsWhileFetchesFail(t *testing.T) {
	t.Parallel()
	pool := pgtest.OpenPool(t, pgtest.NewDatabase(t), 8)
	ctx := t.Context()
	reg := prometheus.NewRegistry()
	startService(t, pool, jobs.Config{Metrics: telemetry.NewMetrics(reg, telemetry.Labels{})})
	lastPoll := func() float64 {
		t.Helper()
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range families {
			if f.GetName() == "converge_worker_last_poll_timestamp_seconds" {
				return f.GetMetric()[0].GetGauge().GetValue()
			}
		}
		t.Fatal("no converge_worker_last_poll_timestamp_seconds")
		return 0
	}
	testkit.Eventually(t, 10*time.Second, func() (bool, string) {
		return lastPoll() > 0, "the idle worker has not reported a poll"
	})

	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) }) // before Stop
	if _, err := tx.Exec(ctx, `LOCK TABLE river_job IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	// A fetch answered just before the lock may still report; none after.
	time.Sleep(100 * time.Millisecond)
	stuck := lastPoll()
	time.Sleep(500 * time.Millisecond) // 25 fetch poll intervals
	if got := lastPoll(); got != stuck {
		t.Errorf("last poll moved by %.3f s while no fetch could complete", got-stuck)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, func() (bool, string) {
		return lastPoll() > stuck, "no poll reported once fetches complete again"
	})
}
