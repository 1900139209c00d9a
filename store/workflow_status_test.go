package store_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/store"
)

// counted is what a store's workflow run observer (converge_workflow_runs_total)
// heard, as "workflow status" lines.
type counted struct{ seen []string }

func (c *counted) observe(w *wf) {
	w.st.ObserveWorkflowRuns(func(wf, st string) { c.seen = append(c.seen, wf+" "+st) })
}

// take returns what was counted since the last take, sorted.
func (c *counted) take() string {
	s := slices.Clone(c.seen)
	c.seen = nil
	slices.Sort(s)
	return strings.Join(s, ",")
}

func wantCounted(t *testing.T, c *counted, want string) {
	t.Helper()
	if got := c.take(); got != want {
		t.Fatalf("counted %q, want %q", got, want)
	}
}

// TestWorkflowRunsCountedOnOperatorActions: an operator cancelling or
// rejecting one step's run, and discarding a step's dead letter after a
// sibling's redrive, each count the workflow run's new status once.
func TestWorkflowRunsCountedOnOperatorActions(t *testing.T) {
	t.Parallel()
	w := newApprovalWF(t)
	var c counted
	c.observe(w)
	ctx := t.Context()

	// Cancel of a step's run.
	res, err := w.start(t, "cancel", 1, `{}`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.st.RunCancel(ctx, *w.get(t, res.WorkflowRun.ID).Steps[0].RunID, converge.AuditEntry{Actor: "ops"}); err != nil {
		t.Fatal(err)
	}
	wantCounted(t, &c, "release cancelled")

	// Reject of a held step (approve counts nothing).
	_, prod := w.toProd(t, "reject", 1)
	wantCounted(t, &c, "")
	if _, err := w.st.RunReject(ctx, prod, converge.AuditEntry{Actor: "ops", Role: "operator"}); err != nil {
		t.Fatal(err)
	}
	wantCounted(t, &c, "release cancelled")

	// Both deploys fail (the workflow run fails once); canary's redrive
	// sets it running, staging's discard fails it again, for good.
	res, err = w.start(t, "discard", 1, `{}`)
	if err != nil {
		t.Fatal(err)
	}
	id := res.WorkflowRun.ID
	w.run(t, id, "build", `{}`, nil)
	w.run(t, id, "canary", "", permanent)
	w.run(t, id, "staging", "", permanent)
	wantCounted(t, &c, "release failed")
	steps := w.get(t, id).Steps
	if _, err := w.st.DeadLetterRedrive(ctx, store.DeadLetterRedriveParams{ID: *steps[1].DeadLetterID,
		Kinds: converge.KindPolicies{"deploy": {MaxAttempts: 1}}, Audit: converge.AuditEntry{Actor: "ops"}}); err != nil {
		t.Fatal(err)
	}
	wantStatuses(t, w.statuses(t, id), "running build=succeeded canary=queued staging=failed prod=pending")
	if _, err := w.st.DeadLetterDiscard(ctx, *steps[2].DeadLetterID, converge.AuditEntry{Actor: "ops"}); err != nil {
		t.Fatal(err)
	}
	wantStatuses(t, w.statuses(t, id), "failed(final) build=succeeded canary=queued staging=failed prod=skipped")
	wantCounted(t, &c, "release failed")
}

// TestWorkflowRunsCountedWhenWorkerVanished: a step run whose only
// attempt's worker vanished (its lease expired; the reconciler gave it a
// fresh job) fails when that job begins, failing its workflow run, and
// the failure is counted, on the single and the batched begin alike.
func TestWorkflowRunsCountedWhenWorkerVanished(t *testing.T) {
	t.Parallel()
	w := newWF(t)
	var c counted
	c.observe(w)
	ctx := t.Context()
	// build gets one attempt: the abandoned one is its last.
	start := func(resource string) uuid.UUID {
		t.Helper()
		res, err := w.st.WorkflowRunStart(ctx, store.WorkflowRunStartParams{
			WorkflowRunStart: converge.WorkflowRunStart{Workflow: "release", Resource: resource, Version: 1, Payload: json.RawMessage(`{}`)},
			Definition:       w.def,
			Policies:         map[string]store.StepPolicy{"build": {MaxAttempts: 1}, "deploy": {MaxAttempts: 1}},
		})
		if err != nil {
			t.Fatal(err)
		}
		return *w.get(t, res.WorkflowRun.ID).Steps[0].RunID
	}
	job := func(run uuid.UUID) int64 {
		t.Helper()
		var j int64
		if err := w.pool.QueryRow(ctx, `SELECT job_id FROM converge_runs WHERE id = $1`, run).Scan(&j); err != nil {
			t.Fatal(err)
		}
		return j
	}
	// vanish begins run's attempt with a short lease, lets the lease
	// expire without finishing, and rescues the run.
	vanish := func(run uuid.UUID) {
		t.Helper()
		if tk, err := w.st.AttemptBegin(ctx, run, job(run), 10*time.Millisecond); err != nil || tk.Decision != converge.DecisionCall {
			t.Fatalf("begin: %v, %+v", err, tk)
		}
		time.Sleep(50 * time.Millisecond)
		if ok, err := w.st.RunRescue(ctx, run, time.Hour); err != nil || !ok {
			t.Fatalf("rescue: %v, %v", ok, err)
		}
	}

	one := start("one")
	vanish(one)
	wantCounted(t, &c, "")
	if tk, err := w.st.AttemptBegin(ctx, one, job(one), time.Minute); err != nil || tk.Decision != converge.DecisionDone {
		t.Fatalf("begin after rescue: %v, %+v", err, tk)
	}
	wantCounted(t, &c, "release failed")

	two, three := start("two"), start("three")
	vanish(two)
	tks, err := w.st.AttemptBeginMany(ctx, []store.AttemptBeginParams{{RunID: two, JobID: job(two), LeaseTTL: time.Minute},
		{RunID: three, JobID: job(three), LeaseTTL: time.Minute}})
	if err != nil || tks[0] == nil || tks[0].Decision != converge.DecisionDone || tks[1] == nil || tks[1].Decision != converge.DecisionCall {
		t.Fatalf("begin many: %v, %+v", err, tks)
	}
	wantCounted(t, &c, "release failed")
	for _, run := range []uuid.UUID{one, two} {
		var st converge.RunStatus
		if err := w.pool.QueryRow(ctx, `SELECT status FROM converge_runs WHERE id = $1`, run).Scan(&st); err != nil || st != converge.RunFailed {
			t.Fatalf("run %s: %s, %v", run, st, err)
		}
	}
}
