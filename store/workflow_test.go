package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/store"
	"github.com/converge-run/converge/test/pgtest"
)

// wf is a store on a database of its own with the release workflow of SPEC
// §10 (without its approval): build, then staging and canary, then prod.
type wf struct {
	st   *store.Store
	pool *pgxpool.Pool
	def  *converge.Workflow
}

func newWF(t *testing.T) *wf {
	t.Helper()
	pool := pgtest.OpenPool(t, pgtest.NewDatabase(t), 4)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		t.Fatalf("river client: %v", err)
	}
	def, err := converge.NewWorkflow("release", map[string]*converge.WorkflowStep{
		"build":   {Kind: "build"},
		"staging": {Kind: "deploy", Resource: "staging/{resource}", Needs: []string{"build"}},
		"canary":  {Kind: "deploy", Resource: "canary/{resource}", Needs: []string{"build"}},
		"prod":    {Kind: "deploy", Resource: "prod/{resource}", Needs: []string{"staging", "canary"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return &wf{st: store.New(pool, client), pool: pool, def: def}
}

func (w *wf) start(t *testing.T, resource string, version int64, payload string) (*store.WorkflowRunStartResult, error) {
	t.Helper()
	return w.st.WorkflowRunStart(t.Context(), store.WorkflowRunStartParams{
		WorkflowRunStart: converge.WorkflowRunStart{Workflow: "release", Resource: resource, Version: version, Payload: json.RawMessage(payload)},
		Definition:       w.def,
		Policies:         map[string]store.StepPolicy{"build": {MaxAttempts: 3}, "deploy": {MaxAttempts: 1}},
	})
}

// mustStart starts the workflow run of resource at version, with an empty
// payload, and returns its id.
func (w *wf) mustStart(t *testing.T, resource string, version int64) uuid.UUID {
	t.Helper()
	res, err := w.start(t, resource, version, `{}`)
	if err != nil {
		t.Fatal(err)
	}
	return res.WorkflowRun.ID
}

func (w *wf) get(t *testing.T, id uuid.UUID) *converge.WorkflowRun {
	t.Helper()
	r, err := w.st.WorkflowRunGet(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// statuses is "status step=status ..." of workflow run id, steps in order.
func (w *wf) statuses(t *testing.T, id uuid.UUID) string {
	t.Helper()
	r := w.get(t, id)
	s := string(r.Status)
	if r.FinishedAt != nil {
		s += "(final)"
	}
	for _, st := range r.Steps {
		s += " " + st.Name + "=" + string(st.Status)
	}
	return s
}

// run finishes the latest run of step name of workflow run id: begins an
// attempt and finishes it with output (nil error) or err.
func (w *wf) run(t *testing.T, id uuid.UUID, name string, output string, err *converge.Error) {
	t.Helper()
	ctx := t.Context()
	var step *converge.WorkflowRunStep
	for _, s := range w.get(t, id).Steps {
		if s.Name == name {
			step = s
		}
	}
	if step == nil || step.RunID == nil {
		t.Fatalf("step %s of %s has no run", name, id)
	}
	var job int64
	if err := w.pool.QueryRow(ctx, `SELECT job_id FROM converge_runs WHERE id = $1`, *step.RunID).Scan(&job); err != nil {
		t.Fatal(err)
	}
	tk, berr := w.st.AttemptBegin(ctx, *step.RunID, job, time.Minute)
	if berr != nil || tk.Decision != converge.DecisionCall {
		t.Fatalf("begin %s: %v, %+v", name, berr, tk)
	}
	var out json.RawMessage
	if output != "" {
		out = json.RawMessage(output)
	}
	if _, ferr := w.st.AttemptFinish(ctx, store.AttemptFinishParams{Run: tk.Run, Attempt: tk.Attempt, Started: time.Now(),
		Err: err, Output: out, Backoff: converge.Backoff{Initial: time.Millisecond, Max: time.Millisecond}}); ferr != nil {
		t.Fatalf("finish %s: %v", name, ferr)
	}
}

// redrive redrives the dead letter of step name of workflow run id.
func (w *wf) redrive(t *testing.T, id uuid.UUID, name string) {
	t.Helper()
	for _, st := range w.get(t, id).Steps {
		if st.Name == name {
			if st.DeadLetterID == nil {
				t.Fatalf("step %s has no dead letter", name)
			}
			if _, err := w.st.DeadLetterRedrive(t.Context(), store.DeadLetterRedriveParams{ID: *st.DeadLetterID,
				Kinds: converge.KindPolicies{"deploy": {Name: "deploy", MaxAttempts: 1}}, Audit: converge.AuditEntry{Actor: "test"}}); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("workflow run %s has no step %s", id, name)
}

func (w *wf) stepPayload(t *testing.T, id uuid.UUID, name string) string {
	t.Helper()
	var p string
	if err := w.pool.QueryRow(t.Context(), `SELECT e.payload::text FROM converge_workflow_steps s JOIN converge_events e ON e.id = s.event_id
		WHERE s.workflow_run_id = $1 AND s.name = $2`, id, name).Scan(&p); err != nil {
		t.Fatal(err)
	}
	return p
}

func wantStatuses(t *testing.T, got, want string) {
	t.Helper()
	if got != want {
		t.Fatalf("workflow run is\n  %s\nwant\n  %s", got, want)
	}
}

var permanent = &converge.Error{Class: converge.ClassPermanent, Message: "broken"}

func TestWorkflowFanOutFanIn(t *testing.T) {
	t.Parallel()
	w := newWF(t)
	res, err := w.start(t, "app", 1, `{"sha":"abc"}`)
	if err != nil || res.Replay {
		t.Fatalf("start: %v, %+v", err, res)
	}
	id := res.WorkflowRun.ID
	wantStatuses(t, w.statuses(t, id), "running build=queued canary=pending staging=pending prod=pending")
	if got := w.stepPayload(t, id, "build"); got != `{"needs": {}, "payload": {"sha": "abc"}}` {
		t.Fatalf("build payload = %s", got)
	}

	w.run(t, id, "build", `{"image":"web:1"}`, nil)
	wantStatuses(t, w.statuses(t, id), "running build=succeeded canary=queued staging=queued prod=pending")
	if got := w.stepPayload(t, id, "staging"); got != `{"needs": {"build": {"image": "web:1"}}, "payload": {"sha": "abc"}}` {
		t.Fatalf("staging payload = %s", got)
	}
	w.run(t, id, "staging", `{"url":"s"}`, nil)
	wantStatuses(t, w.statuses(t, id), "running build=succeeded canary=queued staging=succeeded prod=pending")
	w.run(t, id, "canary", `{"url":"c"}`, nil)
	wantStatuses(t, w.statuses(t, id), "running build=succeeded canary=succeeded staging=succeeded prod=queued")
	if got := w.stepPayload(t, id, "prod"); got != `{"needs": {"canary": {"url": "c"}, "staging": {"url": "s"}}, "payload": {"sha": "abc"}}` {
		t.Fatalf("prod payload = %s", got)
	}
	w.run(t, id, "prod", "", nil)
	wantStatuses(t, w.statuses(t, id), "succeeded(final) build=succeeded canary=succeeded staging=succeeded prod=succeeded")

	// Each step's event names its workflow run.
	ev, err := w.st.EventGet(t.Context(), *w.get(t, id).Steps[3].EventID)
	if err != nil || ev.WorkflowRunID == nil || *ev.WorkflowRunID != id {
		t.Fatalf("prod's event = %+v, %v", ev, err)
	}
	// A final workflow run never changes: the database refuses.
	_, err = w.pool.Exec(t.Context(), `UPDATE converge_workflow_runs SET status = 'failed' WHERE id = $1`, id)
	if !store.IsOneShotViolation(err) {
		t.Fatalf("changing a final workflow run: %v, want a one-shot violation", err)
	}
	_, err = w.pool.Exec(t.Context(), `UPDATE converge_workflow_steps SET state = 'skipped' WHERE workflow_run_id = $1 AND name = 'prod'`, id)
	if !store.IsOneShotViolation(err) {
		t.Fatalf("changing a step of a final workflow run: %v, want a one-shot violation", err)
	}
	_, err = w.pool.Exec(t.Context(), `DELETE FROM converge_workflow_runs WHERE id = $1`, id)
	if !store.IsOneShotViolation(err) {
		t.Fatalf("deleting a workflow run: %v, want a one-shot violation", err)
	}
}

func TestWorkflowStartAnswers(t *testing.T) {
	t.Parallel()
	w := newWF(t)
	first, err := w.start(t, "app", 2, `{"a":1}`)
	if err != nil {
		t.Fatal(err)
	}
	replay, err := w.start(t, "app", 2, `{"a": 1}`)
	if err != nil || !replay.Replay || replay.WorkflowRun.ID != first.WorkflowRun.ID {
		t.Fatalf("replay: %v, %+v", err, replay)
	}
	if _, err := w.start(t, "app", 2, `{"a":2}`); converge.ErrorCode(err) != converge.EVERSIONCONFLICT {
		t.Fatalf("other payload: %v, want version-conflict", err)
	}
	_, err = w.start(t, "app", 1, `{}`)
	var ae *converge.AppError
	if !errors.As(err, &ae) || ae.Code != converge.ESTALEVERSION || ae.LatestVersion == nil || *ae.LatestVersion != 2 {
		t.Fatalf("older version: %v, want stale-version with latest 2", err)
	}
	// Once a newer version is started, version 2 is still replayed with
	// its payload, but another payload is stale (G5: a conflict is only at
	// the highest version), as for an event.
	if _, err := w.start(t, "app", 3, `{}`); err != nil {
		t.Fatal(err)
	}
	if replay, err := w.start(t, "app", 2, `{"a":1}`); err != nil || !replay.Replay || replay.WorkflowRun.ID != first.WorkflowRun.ID {
		t.Fatalf("replay below the highest: %v, %+v", err, replay)
	}
	_, err = w.start(t, "app", 2, `{"a":2}`)
	if !errors.As(err, &ae) || ae.Code != converge.ESTALEVERSION || ae.LatestVersion == nil || *ae.LatestVersion != 3 {
		t.Fatalf("another payload below the highest: %v, want stale-version with latest 3", err)
	}
	// A root step's stream past the version: stale, nothing written.
	if _, err := w.st.EventAccept(t.Context(), store.EventAcceptParams{
		EventSubmission: converge.EventSubmission{Kind: "build", Resource: "web", Version: 7, Payload: json.RawMessage(`{}`)}, MaxAttempts: 1,
	}); err != nil {
		t.Fatal(err)
	}
	_, err = w.start(t, "web", 7, `{}`)
	if !errors.As(err, &ae) || ae.Code != converge.ESTALEVERSION || ae.LatestVersion == nil || *ae.LatestVersion != 7 {
		t.Fatalf("root stream at the version: %v, want stale-version with latest 7", err)
	}
	var n int
	if err := w.pool.QueryRow(t.Context(), `SELECT count(*) FROM converge_workflow_runs WHERE resource = 'web'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("workflow runs of web after a refused start: %d, %v", n, err)
	}
	// A resource whose steps resolve to an invalid key.
	long := make([]byte, 195)
	for i := range long {
		long[i] = 'a'
	}
	if _, err := w.start(t, string(long), 1, `{}`); converge.ErrorCode(err) != converge.EINVALID {
		t.Fatalf("a too long step resource: %v, want invalid", err)
	}
	// A resource for which two steps resolve to one stream: 422 naming
	// resource, nothing written.
	meet, err := converge.NewWorkflow("meet", map[string]*converge.WorkflowStep{
		"a": {Kind: "deploy", Resource: "p/{resource}"},
		"b": {Kind: "deploy", Resource: "{resource}/{resource}", Needs: []string{"a"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = w.st.WorkflowRunStart(t.Context(), store.WorkflowRunStartParams{
		WorkflowRunStart: converge.WorkflowRunStart{Workflow: "meet", Resource: "p", Version: 1},
		Definition:       meet, Policies: map[string]store.StepPolicy{"deploy": {MaxAttempts: 1}},
	})
	if !errors.As(err, &ae) || ae.Code != converge.EINVALID || len(ae.Fields) != 1 || ae.Fields[0].Field != "resource" ||
		!strings.Contains(ae.Message, "both resolve to the stream deploy p/p") {
		t.Fatalf("two steps on one stream: %v, want invalid naming resource", err)
	}
	if err := w.pool.QueryRow(t.Context(), `SELECT count(*) FROM converge_workflow_runs WHERE workflow = 'meet'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("workflow runs of meet after a refused start: %d, %v", n, err)
	}
}

// TestWorkflowPerStageSupersession: a newer workflow run supersedes an
// older one only where its step is accepted; the older run ends superseded
// with its later steps skipped, and the newer one goes on to the end.
func TestWorkflowPerStageSupersession(t *testing.T) {
	t.Parallel()
	w := newWF(t)
	v1 := w.mustStart(t, "app", 1)
	w.run(t, v1, "build", "", nil)
	w.run(t, v1, "staging", "", nil)
	// v1's canary is queued, prod pending. v2 starts: its build does not
	// touch v1 (v1's build is done).
	v2 := w.mustStart(t, "app", 2)
	wantStatuses(t, w.statuses(t, v1), "running build=succeeded canary=queued staging=succeeded prod=pending")
	// v2's build succeeds: its canary supersedes v1's queued canary.
	w.run(t, v2, "build", "", nil)
	wantStatuses(t, w.statuses(t, v1), "superseded(final) build=succeeded canary=superseded staging=succeeded prod=skipped")
	wantStatuses(t, w.statuses(t, v2), "running build=succeeded canary=queued staging=queued prod=pending")
	w.run(t, v2, "staging", "", nil)
	w.run(t, v2, "canary", "", nil)
	w.run(t, v2, "prod", "", nil)
	wantStatuses(t, w.statuses(t, v2), "succeeded(final) build=succeeded canary=succeeded staging=succeeded prod=succeeded")

	// A later step whose stream is already past the version (a direct
	// event) is not accepted: it and its workflow run end superseded.
	v3 := w.mustStart(t, "app", 3)
	if _, err := w.st.EventAccept(t.Context(), store.EventAcceptParams{
		EventSubmission: converge.EventSubmission{Kind: "deploy", Resource: "canary/app", Version: 9, Payload: json.RawMessage(`{}`)}, MaxAttempts: 1,
	}); err != nil {
		t.Fatal(err)
	}
	w.run(t, v3, "build", "", nil)
	wantStatuses(t, w.statuses(t, v3), "superseded(final) build=succeeded canary=superseded staging=skipped prod=skipped")
}

// TestWorkflowSiblingStreamAhead: steps that become ready together are
// accepted all or none. When one sibling's stream is already past the
// version, the workflow run ends superseded and the other sibling is
// skipped, never accepted, whichever of the two comes first in the steps'
// order (canary before staging).
func TestWorkflowSiblingStreamAhead(t *testing.T) {
	t.Parallel()
	for _, ahead := range []string{"canary", "staging"} {
		w := newWF(t)
		run := w.mustStart(t, "app", 1)
		if _, err := w.st.EventAccept(t.Context(), store.EventAcceptParams{
			EventSubmission: converge.EventSubmission{Kind: "deploy", Resource: ahead + "/app", Version: 5, Payload: json.RawMessage(`{}`)}, MaxAttempts: 1,
		}); err != nil {
			t.Fatal(err)
		}
		w.run(t, run, "build", "", nil)
		other := map[string]string{"canary": "staging", "staging": "canary"}[ahead]
		got := w.get(t, run)
		for _, st := range got.Steps {
			switch st.Name {
			case ahead:
				if st.Status != converge.StepStatus(converge.RunSuperseded) {
					t.Errorf("%s ahead: step %s is %s, want superseded", ahead, st.Name, st.Status)
				}
			case other:
				if st.Status != converge.StepSkipped || st.EventID != nil {
					t.Errorf("%s ahead: sibling %s is %s with event %v, want skipped with none", ahead, st.Name, st.Status, st.EventID)
				}
			}
		}
		if got.Status != converge.WorkflowSuperseded || got.FinishedAt == nil {
			t.Errorf("%s ahead: workflow run %s, finished %v; want superseded and final", ahead, got.Status, got.FinishedAt)
		}
		var events int
		if err := w.pool.QueryRow(t.Context(), `SELECT count(*) FROM converge_events WHERE resource = $1`, other+"/app").Scan(&events); err != nil {
			t.Fatal(err)
		}
		if events != 0 {
			t.Errorf("%s ahead: %d events on %s/app, want none", ahead, events, other)
		}
	}
}

func TestWorkflowFailureAndResume(t *testing.T) {
	t.Parallel()
	w := newWF(t)
	ctx := t.Context()
	id := w.mustStart(t, "app", 1)
	w.run(t, id, "build", "", nil)
	w.run(t, id, "staging", "", permanent)
	wantStatuses(t, w.statuses(t, id), "failed build=succeeded canary=queued staging=failed prod=pending")
	// The sibling goes on; prod waits for staging.
	w.run(t, id, "canary", "", nil)
	wantStatuses(t, w.statuses(t, id), "failed build=succeeded canary=succeeded staging=failed prod=pending")

	// Redrive the dead letter: running again, and its success resumes.
	staging := w.get(t, id).Steps[2]
	if staging.Name != "staging" || staging.DeadLetterID == nil {
		t.Fatalf("staging = %+v", staging)
	}
	if _, err := w.st.DeadLetterRedrive(ctx, store.DeadLetterRedriveParams{ID: *staging.DeadLetterID,
		Kinds: converge.KindPolicies{"deploy": {Name: "deploy", MaxAttempts: 1}}, Audit: converge.AuditEntry{Actor: "test"}}); err != nil {
		t.Fatal(err)
	}
	wantStatuses(t, w.statuses(t, id), "running build=succeeded canary=succeeded staging=queued prod=pending")
	w.run(t, id, "staging", "", nil)
	wantStatuses(t, w.statuses(t, id), "running build=succeeded canary=succeeded staging=succeeded prod=queued")

	// Discarding a step's dead letter makes the workflow run final.
	id = w.mustStart(t, "other", 1)
	w.run(t, id, "build", "", nil)
	w.run(t, id, "canary", "", permanent)
	canary := w.get(t, id).Steps[1]
	if _, err := w.st.DeadLetterDiscard(ctx, *canary.DeadLetterID, converge.AuditEntry{Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	wantStatuses(t, w.statuses(t, id), "failed(final) build=succeeded canary=failed staging=queued prod=skipped")
	// Its sibling runs on as a plain event; its success changes nothing.
	w.run(t, id, "staging", "", nil)
	wantStatuses(t, w.statuses(t, id), "failed(final) build=succeeded canary=failed staging=succeeded prod=skipped")
}

// TestWorkflowFailedAtRest: two sibling steps fail; one is redriven
// (running again) and succeeds while the other's dead letter is still
// open: with nothing queued, running or held, the workflow run is failed
// again, not running. Redriving the other resumes it to the end.
func TestWorkflowFailedAtRest(t *testing.T) {
	t.Parallel()
	w := newWF(t)
	id := w.mustStart(t, "app", 1)
	w.run(t, id, "build", "", nil)
	w.run(t, id, "staging", "", permanent)
	w.run(t, id, "canary", "", permanent)
	wantStatuses(t, w.statuses(t, id), "failed build=succeeded canary=failed staging=failed prod=pending")
	w.redrive(t, id, "staging")
	wantStatuses(t, w.statuses(t, id), "running build=succeeded canary=failed staging=queued prod=pending")
	w.run(t, id, "staging", "", nil)
	wantStatuses(t, w.statuses(t, id), "failed build=succeeded canary=failed staging=succeeded prod=pending")
	if got := w.get(t, id); got.FinishedAt != nil {
		t.Errorf("finished_at = %v, want null while canary's dead letter is open", got.FinishedAt)
	}
	w.redrive(t, id, "canary")
	wantStatuses(t, w.statuses(t, id), "running build=succeeded canary=queued staging=succeeded prod=pending")
	w.run(t, id, "canary", "", nil)
	wantStatuses(t, w.statuses(t, id), "running build=succeeded canary=succeeded staging=succeeded prod=queued")
	w.run(t, id, "prod", "", nil)
	wantStatuses(t, w.statuses(t, id), "succeeded(final) build=succeeded canary=succeeded staging=succeeded prod=succeeded")
}

func TestWorkflowCancel(t *testing.T) {
	t.Parallel()
	w := newWF(t)
	ctx := t.Context()
	id := w.mustStart(t, "app", 1)
	w.run(t, id, "build", "", nil)
	got, err := w.st.WorkflowRunCancel(ctx, id, converge.AuditEntry{Actor: "ops", Role: "operator"})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != converge.WorkflowCancelled || got.FinishedAt == nil {
		t.Fatalf("cancelled run = %+v", got)
	}
	wantStatuses(t, w.statuses(t, id), "cancelled(final) build=succeeded canary=cancelled staging=cancelled prod=skipped")
	if _, err := w.st.WorkflowRunCancel(ctx, id, converge.AuditEntry{Actor: "ops"}); !errors.Is(err, store.ErrRunFinished) {
		t.Fatalf("cancel again: %v, want ErrRunFinished", err)
	}
	if _, err := w.st.WorkflowRunCancel(ctx, uuid.Must(uuid.NewV7()), converge.AuditEntry{Actor: "ops"}); !errors.Is(err, converge.ErrNotFound) {
		t.Fatalf("cancel unknown: %v, want ErrNotFound", err)
	}
	var n int
	if err := w.pool.QueryRow(ctx, `SELECT count(*) FROM converge_audit WHERE action = 'workflow_run.cancel'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("audit entries: %d, %v", n, err)
	}

	// An operator cancelling one step's run ends its workflow run cancelled.
	id = w.mustStart(t, "two", 1)
	if _, err := w.st.RunCancel(ctx, *w.get(t, id).Steps[0].RunID, converge.AuditEntry{Actor: "ops"}); err != nil {
		t.Fatal(err)
	}
	wantStatuses(t, w.statuses(t, id), "cancelled(final) build=cancelled canary=skipped staging=skipped prod=skipped")

	// Lists filter by workflow, resource and status.
	items, _, err := w.st.WorkflowRunList(ctx, converge.WorkflowRunListParams{Status: converge.WorkflowCancelled, Limit: 10})
	if err != nil || len(items) != 2 || items[0].ID != id {
		t.Fatalf("list cancelled: %d items, %v", len(items), err)
	}
	items, next, err := w.st.WorkflowRunList(ctx, converge.WorkflowRunListParams{Resource: "app", Limit: 1})
	if err != nil || len(items) != 1 || next != nil || len(items[0].Steps) != 4 {
		t.Fatalf("list app: %d items, next %v, %v", len(items), next, err)
	}
}

// TestWorkflowFinishDeadlockRetried: two step finishes whose workflow
// runs meet streams in opposite orders deadlock, and PostgreSQL aborts one
// of them; the aborted finish is run again in a new transaction, so both
// outcomes are recorded (before, the victim's error reached the worker,
// whose success was then only rescued after rescue_after, calling the
// target again). The interleaving is forced with a third transaction
// holding v1 staging's run row.
//
// v1's staging finish locks the staging stream, then (its success moves
// the workflow run on) v1's workflow run. v2's build finish accepts v2's
// canary, which supersedes v1's queued canary, whose trigger locks v1's
// workflow run; it then accepts v2's staging, which waits for the staging
// stream.
func TestWorkflowFinishDeadlockRetried(t *testing.T) {
	t.Parallel()
	w := newWF(t)
	ctx := t.Context()
	v1 := w.mustStart(t, "app", 1)
	w.run(t, v1, "build", "", nil)
	v2 := w.mustStart(t, "app", 2)
	staging := w.begin(t, v1, "staging")
	build := w.begin(t, v2, "build")
	finish := func(tk *converge.AttemptTicket) error {
		_, err := w.st.AttemptFinish(ctx, store.AttemptFinishParams{Run: tk.Run, Attempt: tk.Attempt, Started: time.Now(),
			Backoff: converge.Backoff{Initial: time.Millisecond, Max: time.Millisecond}})
		return err
	}
	// Hold v1 staging's run row so that its finish stops after locking
	// the staging stream.
	blocker, err := w.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = blocker.Rollback(ctx) }()
	if _, err := blocker.Exec(ctx, `SELECT 1 FROM converge_runs WHERE id = $1 FOR UPDATE`, staging.Run.ID); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 2)
	go func() { errs <- finish(staging) }()
	waitLocks(t, w.pool, 1)
	go func() { errs <- finish(build) }()
	waitLocks(t, w.pool, 2)
	if err := blocker.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Errorf("finish: %v", err)
		}
	}
	// Whichever finish was the victim, v1 ends superseded (its canary) and
	// v2 runs on with both its deploys accepted.
	wantStatuses(t, w.statuses(t, v2), "running build=succeeded canary=queued staging=queued prod=pending")
	got := w.statuses(t, v1)
	if got != "superseded(final) build=succeeded canary=superseded staging=succeeded prod=skipped" &&
		got != "superseded(final) build=succeeded canary=superseded staging=superseded prod=skipped" {
		t.Fatalf("v1 = %s", got)
	}
}

// begin begins an attempt of the latest run of step name of workflow run
// id.
func (w *wf) begin(t *testing.T, id uuid.UUID, name string) *converge.AttemptTicket {
	t.Helper()
	ctx := t.Context()
	var runID uuid.UUID
	var job int64
	if err := w.pool.QueryRow(ctx, `SELECT r.id, r.job_id FROM converge_workflow_steps s JOIN converge_runs r ON r.event_id = s.event_id
		WHERE s.workflow_run_id = $1 AND s.name = $2 ORDER BY r.number DESC LIMIT 1`, id, name).Scan(&runID, &job); err != nil {
		t.Fatal(err)
	}
	tk, err := w.st.AttemptBegin(ctx, runID, job, time.Minute)
	if err != nil || tk.Decision != converge.DecisionCall {
		t.Fatalf("begin %s: %v, %+v", name, err, tk)
	}
	return tk
}

// TestWorkflowReadyStepsLockOrder: steps that become ready together are
// accepted in their streams' lock order (kind, then resource), not in the
// order they are listed (staging before canary here), so that the finish
// accepting them takes their streams as a begin batch does and no deadlock
// forms. A transaction holds canary/app's stream while build's success
// accepts both: the finish must wait for canary/app without holding
// staging/app, which the transaction then takes at once.
func TestWorkflowReadyStepsLockOrder(t *testing.T) {
	t.Parallel()
	w := newWF(t)
	ctx := t.Context()
	steps := map[string]*converge.WorkflowStep{
		"build":   {Kind: "build"},
		"staging": {Kind: "deploy", Resource: "staging/{resource}", Needs: []string{"build"}},
		"canary":  {Kind: "deploy", Resource: "canary/{resource}", Needs: []string{"build"}},
		"prod":    {Kind: "deploy", Resource: "prod/{resource}", Needs: []string{"staging", "canary"}},
	}
	def, err := converge.NewWorkflowInOrder("release", []string{"build", "staging", "canary", "prod"}, steps)
	if err != nil {
		t.Fatal(err)
	}
	if def.Steps[1].Name != "staging" {
		t.Fatalf("steps %v: want staging listed before canary", def.Steps)
	}
	w.def = def
	// The two streams exist, behind the workflow run's version.
	for _, r := range []string{"staging/app", "canary/app"} {
		if _, err := w.st.EventAccept(ctx, store.EventAcceptParams{
			EventSubmission: converge.EventSubmission{Kind: "deploy", Resource: r, Version: 1, Payload: json.RawMessage(`{}`)}, MaxAttempts: 1,
		}); err != nil {
			t.Fatal(err)
		}
	}
	run := w.mustStart(t, "app", 10)
	build := w.begin(t, run, "build")

	tx, err := w.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, `SELECT 1 FROM converge_streams WHERE kind = 'deploy' AND resource = 'canary/app' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	finished := make(chan error, 1)
	go func() {
		_, err := w.st.AttemptFinish(ctx, store.AttemptFinishParams{Run: build.Run, Attempt: build.Attempt, Started: time.Now()})
		finished <- err
	}()
	waitLocks(t, w.pool, 1) // the finish waits for canary/app
	// Well under deadlock_timeout: a finish holding staging/app would make
	// this wait, then fail.
	if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '500ms'`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1 FROM converge_streams WHERE kind = 'deploy' AND resource = 'staging/app' FOR UPDATE`); err != nil {
		t.Errorf("staging/app's stream while the finish waits for canary/app's: %v (the finish took staging/app first)", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-finished; err != nil {
		t.Fatalf("finish build: %v", err)
	}
	wantStatuses(t, w.statuses(t, run), "running build=succeeded staging=queued canary=queued prod=pending")
}

// TestWorkflowCancelRacesStepFinish: a workflow run cancelled while a
// step's finish holds that step's run row ends with every step run the
// finish accepted cancelled too (SPEC §10 Cancel). The cancel's first
// statement waits for build's run row and, once build's success commits,
// skips it (finished) without seeing staging and canary (rows inserted
// after its snapshot); before, it then ended the workflow run cancelled and
// left them queued, to call their targets after the cancel was answered.
// The interleaving is forced with a third transaction holding the
// workflow run's row, which build's finish takes after its own run's.
func TestWorkflowCancelRacesStepFinish(t *testing.T) {
	t.Parallel()
	w := newWF(t)
	ctx := t.Context()
	id := w.mustStart(t, "app", 1)
	build := w.begin(t, id, "build")
	w.cancelDuring(t, id, "finish build", func() error {
		_, err := w.st.AttemptFinish(ctx, store.AttemptFinishParams{Run: build.Run, Attempt: build.Attempt, Started: time.Now(),
			Backoff: converge.Backoff{Initial: time.Millisecond, Max: time.Millisecond}})
		return err
	})
	wantStatuses(t, w.statuses(t, id), "cancelled(final) build=succeeded canary=cancelled staging=cancelled prod=skipped")
}

// cancelDuring cancels workflow run id while step (a finish or a redrive
// that moves it on) commits, in the interleaving of the cancel races: a
// third transaction holds the workflow run's row, step runs and waits for
// it, the cancel starts and waits too, and the third lets go. Both must
// succeed, and no step run of id may be left unfinished.
func (w *wf) cancelDuring(t *testing.T, id uuid.UUID, what string, step func() error) {
	t.Helper()
	ctx := t.Context()
	blocker, err := w.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = blocker.Rollback(ctx) }()
	if _, err := blocker.Exec(ctx, `SELECT 1 FROM converge_workflow_runs WHERE id = $1 FOR UPDATE`, id); err != nil {
		t.Fatal(err)
	}
	stepped := make(chan error, 1)
	go func() { stepped <- step() }()
	waitLocks(t, w.pool, 1)
	cancelled := make(chan error, 1)
	go func() {
		_, err := w.st.WorkflowRunCancel(ctx, id, converge.AuditEntry{Actor: "ops", Role: "operator"})
		cancelled <- err
	}()
	waitLocks(t, w.pool, 2)
	if err := blocker.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-stepped; err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if err := <-cancelled; err != nil {
		t.Fatalf("cancel: %v", err)
	}
	var open int
	if err := w.pool.QueryRow(ctx, `SELECT count(*) FROM converge_runs WHERE workflow_run_id = $1 AND finished_at IS NULL`, id).Scan(&open); err != nil || open != 0 {
		t.Fatalf("unfinished step runs after the cancel: %d, %v", open, err)
	}
}

// waitLocks waits until n transactions of the test's database wait for a
// lock.
func waitLocks(t *testing.T, pool *pgxpool.Pool, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var got int
		if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d transactions waiting for a lock, want %d", got, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestWorkflowCancelRacesRedrive: a workflow run cancelled while a redrive
// of its failed step's dead letter commits ends with the redrive's run
// cancelled too (SPEC §10 Cancel). The cancel's first statement finds no
// unfinished step run (the redrive's is not committed) and waits for the
// workflow run, which the redrive's trigger holds to set it running again;
// before, the cancel then ended the workflow run cancelled and left the
// new run queued. The interleaving is forced with a third transaction
// holding the workflow run's row.
func TestWorkflowCancelRacesRedrive(t *testing.T) {
	t.Parallel()
	w := newWF(t)
	ctx := t.Context()
	id := w.mustStart(t, "app", 1)
	w.run(t, id, "build", "", permanent)
	build := w.get(t, id).Steps[0]
	if build.Name != "build" || build.DeadLetterID == nil {
		t.Fatalf("build = %+v", build)
	}
	w.cancelDuring(t, id, "redrive", func() error {
		_, err := w.st.DeadLetterRedrive(ctx, store.DeadLetterRedriveParams{ID: *build.DeadLetterID,
			Kinds: converge.KindPolicies{"build": {Name: "build", MaxAttempts: 3}}, Audit: converge.AuditEntry{Actor: "ops"}})
		return err
	})
	wantStatuses(t, w.statuses(t, id), "cancelled(final) build=cancelled canary=skipped staging=skipped prod=skipped")
}
