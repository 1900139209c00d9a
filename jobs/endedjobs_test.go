package jobs_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/store"
)

// TestEndedRunsDeleteTheirJobs: the finish that ends a run (success or
// failure, one call or a batch) deletes the run's River job in its own
// transaction; a retry keeps it (the job snoozes and runs the next
// attempt); a job another transaction holds is skipped without waiting for
// it, and the finish still commits.
func TestEndedRunsDeleteTheirJobs(t *testing.T) {
	t.Parallel()
	st, pool := newBatchStore(t)
	ctx := t.Context()
	const n = 12
	runs := make([]*converge.Run, n)
	jobIDs := make([]int64, n)
	for i := range n {
		res, err := accept(t, st, "deploy", fmt.Sprintf("ended/%d", i), 1, `{}`)
		if err != nil {
			t.Fatal(err)
		}
		jobIDs[i] = runJobID(t, pool, res.Run.ID)
		tk, err := st.AttemptBegin(ctx, res.Run.ID, jobIDs[i], time.Minute)
		if err != nil || tk.Decision != converge.DecisionCall {
			t.Fatalf("begin %d: %+v, %v", i, tk, err)
		}
		runs[i] = tk.Run
	}
	// The last run's job is held by another transaction, as River's
	// completer holds it while it marks the job completed.
	holder, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := holder.Exec(ctx, `SELECT id FROM river_job WHERE id = $1 FOR UPDATE`, jobIDs[n-1]); err != nil {
		t.Fatal(err)
	}

	permanent := &converge.Error{Class: converge.ClassPermanent, Message: "400"}
	transient := &converge.Error{Class: converge.ClassTransient, Message: "503"}
	backoff := converge.Backoff{Initial: time.Second, Max: time.Minute}
	// i%4: 0 succeeds alone (AttemptFinish), 1 and the held one succeed
	// in one batch (AttemptFinishMany), 2 fails permanently and 3 is
	// retried in that batch too.
	want := make([]converge.RunStatus, n)
	results := make([]*store.AttemptFinishResult, n)
	errs := make([]error, n)
	finishCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	var batch []store.AttemptFinishParams
	var inBatch []int
	var lone []int
	for i := range n {
		p := store.AttemptFinishParams{Run: runs[i], JobID: jobIDs[i], Attempt: 1, Started: time.Now(), Backoff: backoff}
		switch {
		case i == n-1 || i%4 == 1:
			want[i] = converge.RunSucceeded
		case i%4 == 0:
			want[i] = converge.RunSucceeded
			lone = append(lone, i)
			continue
		case i%4 == 2:
			want[i], p.Err = converge.RunFailed, permanent
		default:
			want[i], p.Err = converge.RunRetrying, transient
		}
		batch, inBatch = append(batch, p), append(inBatch, i)
	}
	concurrently(len(lone)+1, func(j int) {
		if j < len(lone) {
			i := lone[j]
			results[i], errs[i] = st.Store.AttemptFinish(finishCtx, store.AttemptFinishParams{Run: runs[i], JobID: jobIDs[i], Attempt: 1, Started: time.Now(), Backoff: backoff})
			return
		}
		res, err := st.Store.AttemptFinishMany(finishCtx, batch)
		for x, i := range inBatch {
			errs[i] = err
			if err == nil {
				results[i] = res[x]
			}
		}
	})
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("finish %d: %v (a held job must be skipped, not waited for)", i, errs[i])
		}
		if results[i].Status != want[i] {
			t.Errorf("finish %d: status %s, want %s", i, results[i].Status, want[i])
		}
		var jobs int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE id = $1`, jobIDs[i]).Scan(&jobs); err != nil {
			t.Fatal(err)
		}
		keep := want[i] == converge.RunRetrying || i == n-1
		switch {
		case keep && jobs != 1:
			t.Errorf("run %d (%s): its job is gone, want it kept", i, want[i])
		case !keep && jobs != 0:
			t.Errorf("run %d (%s): its job is still there, want it deleted by the finish", i, want[i])
		}
	}
}

// TestEndedJobsDeleteTakesNoLockBeforeAWake: a batch of finishes that ends
// one run and wakes another stream's waiting run (the finish of a run
// superseded during its call) deletes the ended run's job only after the
// wake. River's completer locks its batch's jobs in any order; here a
// transaction holds the waiting run's job, as the completer may, and then
// asks for the ended run's job. Had the finish deleted that job before
// waking, each would wait for the other (a deadlock, broken after
// deadlock_timeout by failing one of them).
func TestEndedJobsDeleteTakesNoLockBeforeAWake(t *testing.T) {
	t.Parallel()
	st, pool := newBatchStore(t)
	ctx := t.Context()
	begin := func(res *converge.EventAcceptResult) *converge.AttemptTicket {
		t.Helper()
		tk, err := st.Store.AttemptBegin(ctx, res.Run.ID, runJobID(t, pool, res.Run.ID), time.Minute)
		if err != nil || tk.Decision != converge.DecisionCall {
			t.Fatalf("begin %s: %+v, %v", res.Run.Resource, tk, err)
		}
		return tk
	}
	mustAccept := func(resource string, version int64) *converge.EventAcceptResult {
		t.Helper()
		res, err := accept(t, st, "deploy", resource, version, `{}`)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	// F is in its call when v2 of its stream supersedes it; v2's run W
	// waits for the lease, which F's finish releases (a wake of W's job).
	fAccepted := mustAccept("wake/f", 1)
	jobF := runJobID(t, pool, fAccepted.Run.ID)
	f := begin(fAccepted)
	w := mustAccept("wake/f", 2)
	// A is in its call on another stream and succeeds in the same batch.
	a := begin(mustAccept("wake/a", 1))
	jobW, jobA := runJobID(t, pool, w.Run.ID), runJobID(t, pool, a.Run.ID)

	holder, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := holder.Exec(ctx, `SELECT id FROM river_job WHERE id = $1 FOR UPDATE`, jobW); err != nil {
		t.Fatal(err)
	}
	var holderPID int
	if err := holder.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&holderPID); err != nil {
		t.Fatal(err)
	}

	type outcome struct {
		res []*store.AttemptFinishResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := st.Store.AttemptFinishMany(ctx, []store.AttemptFinishParams{
			{Run: a.Run, JobID: jobA, Attempt: a.Attempt, Started: time.Now()},
			{Run: f.Run, JobID: jobF, Attempt: f.Attempt, Started: time.Now()},
		})
		done <- outcome{res, err}
	}()
	// Wait until the finish waits for the holder (the wake of W's job).
	deadline := time.Now().Add(10 * time.Second)
	for {
		var waiting bool
		if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE $1 = ANY(pg_blocking_pids(pid)))`, holderPID).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			break
		}
		select {
		case o := <-done:
			t.Fatalf("the finish did not wait for the waiting run's job: %+v, %v", o.res, o.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the finish never waited for the waiting run's job")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Now the holder asks for A's job, as River's completer would for
	// the next job of its batch: it must not be held by the finish.
	asked := time.Now()
	if _, err := holder.Exec(ctx, `SET LOCAL lock_timeout = '5s'`); err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Exec(ctx, `SELECT id FROM river_job WHERE id = $1 FOR UPDATE`, jobA); err != nil {
		t.Fatalf("lock the ended run's job after the finish began: %v", err)
	}
	if took := time.Since(asked); took > 500*time.Millisecond {
		t.Errorf("the ended run's job was held by the finish for %v before the wake", took)
	}
	if err := holder.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	o := <-done
	if o.err != nil {
		t.Fatalf("finish: %v", o.err)
	}
	if o.res[0].Status != converge.RunSucceeded || !o.res[1].Fenced {
		t.Errorf("finish: %+v, %+v; want A succeeded and F fenced", o.res[0], o.res[1])
	}
	var jobs int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE id = $1`, jobA).Scan(&jobs); err != nil || jobs != 0 {
		t.Errorf("A's job: %d rows (%v), want it deleted", jobs, err)
	}
}
