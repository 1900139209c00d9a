package store_test

import (
	"reflect"
	"testing"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/store"
)

// TestWorkflowRunFinalShowsItsStepRuns: a workflow run with finished_at set
// never changes again (SPEC §10), what it shows included. Cancelled while
// a failed step's dead letter was open, it keeps showing that step's
// failed run and dead letter after the dead letter is redriven and the
// new run succeeds; the new run is the step event's, not the workflow
// run's. A workflow run that is still running shows its steps' latest
// runs.
func TestWorkflowRunFinalShowsItsStepRuns(t *testing.T) {
	t.Parallel()
	w := newWF(t)
	ctx := t.Context()
	id := w.mustStart(t, "final", 1)
	w.run(t, id, "build", `{}`, nil)
	w.run(t, id, "canary", "", permanent)
	wantStatuses(t, w.statuses(t, id), "failed build=succeeded canary=failed staging=queued prod=pending")
	if _, err := w.st.WorkflowRunCancel(ctx, id, converge.AuditEntry{Actor: "ops", Role: "operator"}); err != nil {
		t.Fatal(err)
	}
	before := w.get(t, id)
	wantStatuses(t, w.statuses(t, id), "cancelled(final) build=succeeded canary=failed staging=cancelled prod=skipped")
	canary := before.Steps[1]
	if canary.DeadLetterID == nil {
		t.Fatal("canary has no dead letter")
	}

	redriven, err := w.st.DeadLetterRedrive(ctx, store.DeadLetterRedriveParams{ID: *canary.DeadLetterID,
		Kinds: converge.KindPolicies{"deploy": {MaxAttempts: 1}}, Audit: converge.AuditEntry{Actor: "ops"}})
	if err != nil {
		t.Fatal(err)
	}
	if redriven.ID == *canary.RunID || redriven.EventID != *canary.EventID {
		t.Fatalf("redrive made run %s of event %s, want a new run of the step's event %s", redriven.ID, redriven.EventID, *canary.EventID)
	}
	var job int64
	if err := w.pool.QueryRow(ctx, `SELECT job_id FROM converge_runs WHERE id = $1`, redriven.ID).Scan(&job); err != nil {
		t.Fatal(err)
	}
	tk, err := w.st.AttemptBegin(ctx, redriven.ID, job, 0)
	if err != nil || tk.Decision != converge.DecisionCall {
		t.Fatalf("begin the redriven run: %v, %+v", err, tk)
	}
	if _, err := w.st.AttemptFinish(ctx, store.AttemptFinishParams{Run: tk.Run, Attempt: tk.Attempt}); err != nil {
		t.Fatal(err)
	}
	if after := w.get(t, id); !reflect.DeepEqual(after, before) {
		t.Errorf("the final workflow run changed:\n  before %+v\n  after  %+v", stepsOf(before), stepsOf(after))
	}

	// A running workflow run shows its steps' latest runs: a redriven
	// step's new run, which resumes it.
	id = w.mustStart(t, "running", 1)
	w.run(t, id, "build", `{}`, nil)
	w.run(t, id, "canary", "", permanent)
	dl := w.get(t, id).Steps[1].DeadLetterID
	redriven, err = w.st.DeadLetterRedrive(ctx, store.DeadLetterRedriveParams{ID: *dl,
		Kinds: converge.KindPolicies{"deploy": {MaxAttempts: 1}}, Audit: converge.AuditEntry{Actor: "ops"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := w.get(t, id).Steps[1]; got.RunID == nil || *got.RunID != redriven.ID || got.Status != converge.StepStatus(converge.RunQueued) {
		t.Errorf("running workflow run's canary: run %v %s, want the redriven run %s queued", got.RunID, got.Status, redriven.ID)
	}
}

// stepsOf is "name=status run dead-letter" of each step of r, for a
// failure's message.
func stepsOf(r *converge.WorkflowRun) []string {
	out := make([]string, len(r.Steps))
	for i, s := range r.Steps {
		out[i] = s.Name + "=" + string(s.Status)
		if s.RunID != nil {
			out[i] += " " + s.RunID.String()
		}
		if s.DeadLetterID != nil {
			out[i] += " dl " + s.DeadLetterID.String()
		}
	}
	return out
}

// TestWorkflowCancelHeldStep: a workflow run's cancel ends its held step's
// run cancelled too (SPEC §10: every non-terminal step run, held ones
// included), and the final workflow run shows it so.
func TestWorkflowCancelHeldStep(t *testing.T) {
	t.Parallel()
	w := newApprovalWF(t)
	id, prod := w.toProd(t, "held", 1)
	wantStatuses(t, w.statuses(t, id), "waiting build=succeeded canary=succeeded staging=succeeded prod=held")
	if _, err := w.st.WorkflowRunCancel(t.Context(), id, converge.AuditEntry{Actor: "ops", Role: "operator"}); err != nil {
		t.Fatal(err)
	}
	wantStatuses(t, w.statuses(t, id), "cancelled(final) build=succeeded canary=succeeded staging=succeeded prod=cancelled")
	var status converge.RunStatus
	if err := w.pool.QueryRow(t.Context(), `SELECT status FROM converge_runs WHERE id = $1 AND finished_at IS NOT NULL`, prod).Scan(&status); err != nil || status != converge.RunCancelled {
		t.Fatalf("prod's run: %s, %v; want cancelled and finished", status, err)
	}
}
