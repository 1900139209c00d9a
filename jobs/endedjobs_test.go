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
		if err := pool.QueryRow(ctx, `SELECT job_id FROM converge_runs WHERE id = $1`, res.Run.ID).Scan(&jobIDs[i]); err != nil {
			t.Fatal(err)
		}
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
	// i%4: 0 succeeds alone (store.AttemptFinish), 1 and the held one
	// succeed batched, 2 fails permanently, 3 is retried.
	want := make([]converge.RunStatus, n)
	results := make([]*store.AttemptFinishResult, n)
	errs := make([]error, n)
	finishCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	concurrently(n, func(i int) {
		p := store.AttemptFinishParams{Run: runs[i], Attempt: 1, Started: time.Now(), Backoff: backoff}
		switch {
		case i == n-1 || i%4 == 1:
			want[i] = converge.RunSucceeded
			results[i], errs[i] = st.gc.AttemptFinish(finishCtx, p)
		case i%4 == 0:
			want[i] = converge.RunSucceeded
			results[i], errs[i] = st.Store.AttemptFinish(finishCtx, p)
		case i%4 == 2:
			want[i], p.Err = converge.RunFailed, permanent
			results[i], errs[i] = st.gc.AttemptFinish(finishCtx, p)
		default:
			want[i], p.Err = converge.RunRetrying, transient
			results[i], errs[i] = st.gc.AttemptFinish(finishCtx, p)
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
