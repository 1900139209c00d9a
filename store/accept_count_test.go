package store_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/store"
)

// acceptCounted is what a store's accept observer heard, as "step kind"
// and "superseded kind n" lines.
type acceptCounted struct{ seen []string }

func (c *acceptCounted) observe(w *wf) {
	w.st.ObserveAccepts(store.AcceptObserver{
		StepAccepted:   func(kind string) { c.seen = append(c.seen, "step "+kind) },
		RunsSuperseded: func(kind string, n int) { c.seen = append(c.seen, fmt.Sprintf("superseded %s %d", kind, n)) },
	})
}

// take returns what was counted since the last take, sorted.
func (c *acceptCounted) take() string {
	s := slices.Clone(c.seen)
	c.seen = nil
	slices.Sort(s)
	return strings.Join(s, ",")
}

func wantAcceptCounted(t *testing.T, c *acceptCounted, want string) {
	t.Helper()
	if got := c.take(); got != want {
		t.Fatalf("counted %q, want %q", got, want)
	}
}

// accept accepts kind/resource@version with payload, failing the test on
// an error.
func (w *wf) accept(t *testing.T, kind, resource string, version int64) *converge.EventAcceptResult {
	t.Helper()
	res, err := w.st.EventAccept(t.Context(), acceptParams(kind, resource, version, `{}`))
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func acceptParams(kind, resource string, version int64, payload string) store.EventAcceptParams {
	return store.EventAcceptParams{EventSubmission: converge.EventSubmission{Kind: kind, Resource: resource, Version: version,
		Payload: json.RawMessage(payload)}, MaxAttempts: 1}
}

// runStatus is run id's status.
func (w *wf) runStatus(t *testing.T, id uuid.UUID) converge.RunStatus {
	t.Helper()
	var st converge.RunStatus
	if err := w.pool.QueryRow(t.Context(), `SELECT status FROM converge_runs WHERE id = $1`, id).Scan(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestAcceptsCountedOnAccepts: the runs an accept supersedes are counted
// once, after its commit, on the single and the batched accept; a batch
// that failed as a whole (after it had superseded) counts nothing, and
// its calls redone alone count once.
func TestAcceptsCountedOnAccepts(t *testing.T) {
	t.Parallel()
	w := newWF(t)
	var c acceptCounted
	c.observe(w)
	ctx := t.Context()

	w.accept(t, "build", "app/web", 1)
	wantAcceptCounted(t, &c, "")
	w.accept(t, "build", "app/web", 2)
	wantAcceptCounted(t, &c, "superseded build 1")

	// A batch superseding on two streams.
	w.accept(t, "deploy", "app/web", 1)
	c.take()
	if _, errs, err := w.st.EventAcceptMany(ctx, []store.EventAcceptParams{acceptParams("build", "app/web", 3, `{}`),
		acceptParams("deploy", "app/web", 2, `{}`), acceptParams("deploy", "app/new", 1, `{}`)}); err != nil || slices.ContainsFunc(errs, func(e error) bool { return e != nil }) {
		t.Fatalf("accept many: %v %v", err, errs)
	}
	wantAcceptCounted(t, &c, "superseded build 1,superseded deploy 1")

	// A batch whose fresh version supersedes, and whose old version's
	// payload PostgreSQL refuses afterwards: the batch rolls back.
	bad := acceptParams("deploy", "app/new", 1, `{"x":"\u0000"}`)
	fresh := acceptParams("build", "app/web", 4, `{}`)
	if _, _, err := w.st.EventAcceptMany(ctx, []store.EventAcceptParams{fresh, bad}); err == nil {
		t.Fatal("a batch with a payload PostgreSQL refuses committed")
	}
	wantAcceptCounted(t, &c, "")
	// Its calls redone alone, as group commit does.
	if _, err := w.st.EventAccept(ctx, fresh); err != nil {
		t.Fatal(err)
	}
	if _, err := w.st.EventAccept(ctx, bad); err == nil {
		t.Fatal("a payload PostgreSQL refuses was accepted")
	}
	wantAcceptCounted(t, &c, "superseded build 1")

	// A replay supersedes nothing.
	w.accept(t, "build", "app/web", 4)
	wantAcceptCounted(t, &c, "")
}

// TestAcceptsCountedOnWorkflows: a workflow run's start superseding the
// step of an older one counts the superseded run (not its root step: the
// API counts those); a step's success accepting the next steps counts
// them, and the runs they supersede; a batch of finishes that fails after
// a step's success accepted its next steps counts nothing, and the
// finishes redone alone count once.
func TestAcceptsCountedOnWorkflows(t *testing.T) {
	t.Parallel()
	w := newWF(t)
	var c acceptCounted
	c.observe(w)
	ctx := t.Context()

	v1, err := w.start(t, "app", 1, `{}`)
	if err != nil {
		t.Fatal(err)
	}
	wantAcceptCounted(t, &c, "")
	v2, err := w.start(t, "app", 2, `{}`)
	if err != nil {
		t.Fatal(err)
	}
	wantAcceptCounted(t, &c, "superseded build 1")
	wantStatuses(t, w.statuses(t, v1.WorkflowRun.ID), "superseded(final) build=superseded canary=skipped staging=skipped prod=skipped")

	// build succeeds: staging and canary are accepted in its finish.
	w.run(t, v2.WorkflowRun.ID, "build", `{}`, nil)
	wantAcceptCounted(t, &c, "step deploy,step deploy")

	// A step accepted by a finish supersedes an event's run.
	old := w.accept(t, "deploy", "staging/aa", 1)
	aa, err := w.start(t, "aa", 2, `{}`)
	if err != nil {
		t.Fatal(err)
	}
	zz, err := w.start(t, "zz", 2, `{}`)
	if err != nil {
		t.Fatal(err)
	}
	c.take()
	// zz's staging step cannot be written: the batch finishing both builds
	// fails after aa's success (first in the lock order) accepted its
	// steps and superseded the event's run.
	if _, err := w.pool.Exec(ctx, `CREATE FUNCTION boom() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'boom'; END $$;
		CREATE TRIGGER boom BEFORE INSERT ON converge_events FOR EACH ROW WHEN (NEW.resource = 'staging/zz') EXECUTE FUNCTION boom()`); err != nil {
		t.Fatal(err)
	}
	begin := func(id uuid.UUID) store.AttemptFinishParams {
		t.Helper()
		run := *w.get(t, id).Steps[0].RunID
		var job int64
		if err := w.pool.QueryRow(ctx, `SELECT job_id FROM converge_runs WHERE id = $1`, run).Scan(&job); err != nil {
			t.Fatal(err)
		}
		tk, err := w.st.AttemptBegin(ctx, run, job, time.Minute)
		if err != nil || tk.Decision != converge.DecisionCall {
			t.Fatalf("begin: %v, %+v", err, tk)
		}
		return store.AttemptFinishParams{Run: tk.Run, Attempt: tk.Attempt, Started: time.Now(), Output: json.RawMessage(`{}`)}
	}
	fa, fz := begin(aa.WorkflowRun.ID), begin(zz.WorkflowRun.ID)
	if _, err := w.st.AttemptFinishMany(ctx, []store.AttemptFinishParams{fz, fa}); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("finish many: %v, want boom", err)
	}
	wantAcceptCounted(t, &c, "")
	if st := w.runStatus(t, old.Run.ID); st != converge.RunQueued {
		t.Fatalf("the event's run is %s after the batch rolled back", st)
	}
	if _, err := w.st.AttemptFinish(ctx, fa); err != nil {
		t.Fatal(err)
	}
	if _, err := w.st.AttemptFinish(ctx, fz); err == nil {
		t.Fatal("zz's build finished with its staging step unwritable")
	}
	wantAcceptCounted(t, &c, "step deploy,step deploy,superseded deploy 1")
	if st := w.runStatus(t, old.Run.ID); st != converge.RunSuperseded {
		t.Fatalf("the event's run is %s, want superseded", st)
	}
	if _, err := w.pool.Exec(ctx, `DROP TRIGGER boom ON converge_events`); err != nil {
		t.Fatal(err)
	}

	// A batch of finishes that commits counts each next step once.
	fz2, err := w.start(t, "zz2", 2, `{}`)
	if err != nil {
		t.Fatal(err)
	}
	fy, err := w.start(t, "yy", 2, `{}`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.st.AttemptFinishMany(ctx, []store.AttemptFinishParams{begin(fz2.WorkflowRun.ID), begin(fy.WorkflowRun.ID)}); err != nil {
		t.Fatal(err)
	}
	wantAcceptCounted(t, &c, "step deploy,step deploy,step deploy,step deploy")
}

// TestAcceptsCountedOnDeliveries: what a delivery's rules supersede is
// counted after its commit; a rule rolled back to its savepoint (a
// workflow run whose second root is stale after its first superseded) and
// a delivery rejected after a rule superseded count nothing.
func TestAcceptsCountedOnDeliveries(t *testing.T) {
	t.Parallel()
	w := newWF(t)
	var c acceptCounted
	c.observe(w)
	ctx := t.Context()
	pair, err := converge.NewWorkflow("pair", map[string]*converge.WorkflowStep{"a": {Kind: "build"}, "b": {Kind: "deploy"}})
	if err != nil {
		t.Fatal(err)
	}
	pairStart := func(version int64) store.DeliveryItem {
		return store.DeliveryItem{Rule: 1, Workflow: &store.WorkflowRunStartParams{
			WorkflowRunStart: converge.WorkflowRunStart{Workflow: "pair", Resource: "p", Version: version, Payload: json.RawMessage(`{}`)},
			Definition:       pair, Policies: map[string]store.StepPolicy{"build": {MaxAttempts: 1}, "deploy": {MaxAttempts: 1}}}}
	}
	event := func(kind, resource string, version int64) store.DeliveryItem {
		p := acceptParams(kind, resource, version, `{}`)
		return store.DeliveryItem{Rule: 0, Event: &p}
	}
	deliver := func(id string, items ...store.DeliveryItem) *converge.DeliveryResult {
		t.Helper()
		res, err := w.st.DeliveryRecord(ctx, store.DeliveryRecordParams{Source: "gh", DeliveryID: id, Items: items})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}

	// build p's run is superseded by the pair's root a, then rolled back
	// with its savepoint when root b (deploy p, at 5) is stale.
	b1 := w.accept(t, "build", "p", 1)
	w.accept(t, "deploy", "p", 5)
	c.take()
	res := deliver("d1", pairStart(2), event("build", "q", 1))
	if res.Accepted[0].Outcome != converge.OutcomeStaleVersion || res.Accepted[1].Outcome != converge.OutcomeAccepted {
		t.Fatalf("outcomes %+v", res.Accepted)
	}
	wantAcceptCounted(t, &c, "")
	if st := w.runStatus(t, b1.Run.ID); st != converge.RunQueued {
		t.Fatalf("build p's run is %s after the stale rule", st)
	}

	// A rule superseding, then one whose resource is invalid: the delivery
	// is rejected, nothing is kept.
	res = deliver("d2", event("build", "q", 2), event("build", "not a key", 1))
	if res.Delivery.Status != converge.DeliveryRejected {
		t.Fatalf("delivery %s, want rejected", res.Delivery.Status)
	}
	wantAcceptCounted(t, &c, "")

	// An event and a workflow run's roots superseding: each counted, once.
	deliver("d3", event("build", "q", 2), pairStart(6))
	wantAcceptCounted(t, &c, "superseded build 1,superseded build 1,superseded deploy 1")
	if st := w.runStatus(t, b1.Run.ID); st != converge.RunSuperseded {
		t.Fatalf("build p's run is %s, want superseded", st)
	}
	// Its redelivery is answered with the first answer: nothing counted.
	if res := deliver("d3", event("build", "q", 2), pairStart(6)); !res.Replay {
		t.Fatal("redelivery not a replay")
	}
	wantAcceptCounted(t, &c, "")
}
