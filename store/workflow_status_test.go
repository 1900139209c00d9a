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

// TestWorkflowRunsCountedOnOperatorActions: a workflow run's start, its
// wait for an approval, and an operator cancelling, rejecting or approving
// one step's run, redriving a step's dead letter, discarding one after a
// sibling's redrive, or releasing a step's quarantined stream each count
// the status the workflow run entered, once.
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
	wantCounted(t, &c, "release running")
	if _, err := w.st.RunCancel(ctx, *w.get(t, res.WorkflowRun.ID).Steps[0].RunID, converge.AuditEntry{Actor: "ops"}); err != nil {
		t.Fatal(err)
	}
	wantCounted(t, &c, "release cancelled")

	// Reject of a held step.
	_, prod := w.toProd(t, "reject", 1)
	wantCounted(t, &c, "release running,release waiting")
	if _, err := w.st.RunReject(ctx, prod, converge.AuditEntry{Actor: "ops", Role: "operator"}); err != nil {
		t.Fatal(err)
	}
	wantCounted(t, &c, "release cancelled")

	// Approval of a held step: running again, then succeeded.
	id, prod := w.toProd(t, "approve", 1)
	wantCounted(t, &c, "release running,release waiting")
	if _, err := w.st.RunApprove(ctx, prod, converge.AuditEntry{Actor: "ops", Role: "operator"}); err != nil {
		t.Fatal(err)
	}
	wantCounted(t, &c, "release running")
	w.run(t, id, "prod", `{}`, nil)
	wantCounted(t, &c, "release succeeded")

	// Both deploys fail (the workflow run fails once); canary's redrive
	// sets it running, staging's discard fails it again, for good.
	res, err = w.start(t, "discard", 1, `{}`)
	if err != nil {
		t.Fatal(err)
	}
	id = res.WorkflowRun.ID
	w.run(t, id, "build", `{}`, nil)
	w.run(t, id, "canary", "", permanent)
	w.run(t, id, "staging", "", permanent)
	wantCounted(t, &c, "release failed,release running")
	steps := w.get(t, id).Steps
	if _, err := w.st.DeadLetterRedrive(ctx, store.DeadLetterRedriveParams{ID: *steps[1].DeadLetterID,
		Kinds: converge.KindPolicies{"deploy": {MaxAttempts: 1}}, Audit: converge.AuditEntry{Actor: "ops"}}); err != nil {
		t.Fatal(err)
	}
	wantStatuses(t, w.statuses(t, id), "running build=succeeded canary=queued staging=failed prod=pending")
	wantCounted(t, &c, "release running")
	if _, err := w.st.DeadLetterDiscard(ctx, *steps[2].DeadLetterID, converge.AuditEntry{Actor: "ops"}); err != nil {
		t.Fatal(err)
	}
	wantStatuses(t, w.statuses(t, id), "failed(final) build=succeeded canary=queued staging=failed prod=skipped")
	wantCounted(t, &c, "release failed")

	// A root step accepted on a quarantined stream is held: the workflow
	// run starts waiting, and the release sets it running.
	if _, err := w.pool.Exec(ctx, `INSERT INTO converge_streams (kind, resource, latest_version, quarantined_at)
		VALUES ('build', 'held', 0, now())`); err != nil {
		t.Fatal(err)
	}
	res, err = w.start(t, "held", 1, `{}`)
	if err != nil {
		t.Fatal(err)
	}
	wantStatuses(t, w.statuses(t, res.WorkflowRun.ID), "waiting build=held canary=pending staging=pending prod=pending")
	wantCounted(t, &c, "release waiting")
	if _, err := w.st.QuarantineRelease(ctx, "build", "held", converge.AuditEntry{Actor: "ops", Role: "operator"}); err != nil {
		t.Fatal(err)
	}
	wantStatuses(t, w.statuses(t, res.WorkflowRun.ID), "running build=queued canary=pending staging=pending prod=pending")
	wantCounted(t, &c, "release running")
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
	wantCounted(t, &c, "release running")
	vanish(one)
	wantCounted(t, &c, "")
	if tk, err := w.st.AttemptBegin(ctx, one, job(one), time.Minute); err != nil || tk.Decision != converge.DecisionDone {
		t.Fatalf("begin after rescue: %v, %+v", err, tk)
	}
	wantCounted(t, &c, "release failed")

	two, three := start("two"), start("three")
	wantCounted(t, &c, "release running,release running")
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
