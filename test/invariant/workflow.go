package invariant

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// dbWorkflowRun is a workflow run with its steps, as the database has it.
type dbWorkflowRun struct {
	id         uuid.UUID
	workflow   string
	resource   string
	version    int64
	status     string
	createdAt  time.Time
	finishedAt *time.Time
	steps      []*dbStep
	// cancelledByOperator is set when the audit log has a
	// workflow_run.cancel of it (POST /v1/workflow-runs/{id}/cancel), as
	// opposed to a cancel of one of its step runs.
	cancelledByOperator bool
}

func (w *dbWorkflowRun) String() string {
	return fmt.Sprintf("%s %s@%d(%s)", w.workflow, w.resource, w.version, w.id)
}

func (w *dbWorkflowRun) step(name string) *dbStep {
	for _, s := range w.steps {
		if s.name == name {
			return s
		}
	}
	return nil
}

// dbStep is one step of a workflow run.
type dbStep struct {
	name, kind, resource string
	needs                []string
	state                string
	eventID              *uuid.UUID
	// finalRun is the number of the run the step showed when its workflow
	// run ended (SPEC §10: a final workflow run never changes again, what
	// it shows included); nil while the workflow run is open.
	finalRun *int
}

// loadWorkflows reads the workflow runs and their steps in tx.
func loadWorkflows(ctx context.Context, tx pgx.Tx, s *snapshot) error {
	s.workflowRuns = map[uuid.UUID]*dbWorkflowRun{}
	rows, err := tx.Query(ctx, `SELECT id, workflow, resource, version, status, created_at, finished_at FROM converge_workflow_runs`)
	if err != nil {
		return fmt.Errorf("read workflow runs: %w", err)
	}
	var w dbWorkflowRun
	_, err = pgx.ForEachRow(rows, []any{&w.id, &w.workflow, &w.resource, &w.version, &w.status, &w.createdAt, &w.finishedAt}, func() error {
		v := w
		w.finishedAt = nil
		s.workflowRuns[v.id] = &v
		return nil
	})
	if err != nil {
		return fmt.Errorf("read workflow runs: %w", err)
	}
	rows, err = tx.Query(ctx, `SELECT workflow_run_id, name, kind, resource, needs, state, event_id, final_run
		FROM converge_workflow_steps ORDER BY workflow_run_id, position`)
	if err != nil {
		return fmt.Errorf("read workflow steps: %w", err)
	}
	var runID uuid.UUID
	var st dbStep
	_, err = pgx.ForEachRow(rows, []any{&runID, &st.name, &st.kind, &st.resource, &st.needs, &st.state, &st.eventID, &st.finalRun}, func() error {
		v := st
		st.eventID, st.needs, st.finalRun = nil, nil, nil
		if w := s.workflowRuns[runID]; w != nil {
			w.steps = append(w.steps, &v)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("read workflow steps: %w", err)
	}
	rows, err = tx.Query(ctx, `SELECT DISTINCT t.id::uuid FROM converge_audit a, jsonb_array_elements_text(a.targets) t(id)
		WHERE a.action = 'workflow_run.cancel'`)
	if err != nil {
		return fmt.Errorf("read workflow cancels: %w", err)
	}
	_, err = pgx.ForEachRow(rows, []any{&runID}, func() error {
		if w := s.workflowRuns[runID]; w != nil {
			w.cancelledByOperator = true
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("read workflow cancels: %w", err)
	}
	rows, err = tx.Query(ctx, `SELECT id, workflow_run_id FROM converge_events WHERE workflow_run_id IS NOT NULL`)
	if err != nil {
		return fmt.Errorf("read step events: %w", err)
	}
	s.eventWorkflow = map[uuid.UUID]uuid.UUID{}
	var evID, wID uuid.UUID
	_, err = pgx.ForEachRow(rows, []any{&evID, &wID}, func() error {
		s.eventWorkflow[evID] = wID
		return nil
	})
	if err != nil {
		return fmt.Errorf("read step events: %w", err)
	}
	return nil
}

// latestRuns returns each event's latest run.
func (c *checker) latestRuns() map[uuid.UUID]*dbRun {
	out := map[uuid.UUID]*dbRun{}
	for _, r := range c.db.runs {
		if cur := out[r.eventID]; cur == nil || r.number > cur.number {
			out[r.eventID] = r
		}
	}
	return out
}

// succeededAt is when event id's run succeeded, if one did.
func (c *checker) succeededAt(eventID uuid.UUID) *time.Time {
	for _, r := range c.db.runs {
		if r.eventID == eventID && r.status == "succeeded" {
			return r.finishedAt
		}
	}
	return nil
}

// checkWorkflows asserts the workflow invariants (rule "W"):
//
//   - every step's event belongs to its workflow run, and every event of a
//     workflow run is one of its steps' (accepted exactly once);
//   - a step is accepted only after every one of its needs succeeded, at
//     the step's own version, and its stream never received it twice;
//   - a step whose needs all succeeded while its workflow run was not
//     final was accepted (or found its stream past the version:
//     superseded);
//   - the workflow run's status matches its steps: succeeded iff every
//     step succeeded; superseded or cancelled only with such a step (or,
//     for cancelled, no pending step); failed with a failed step; running
//     or waiting only with a step queued, running, retrying or held; final
//     (finished_at set) exactly when not running or waiting and with no
//     step pending; not final with no step skipped; a final workflow
//     run's steps show the runs they had when it ended (final_run: a later
//     run of a step's event is a redrive made after the end), an open
//     one's their events' latest;
//   - a workflow run cancelled by an operator (workflow_run.cancel in the
//     audit log) has no step whose first run ended after it (SPEC §10
//     Cancel: every non-terminal step run ends cancelled with it, and no
//     step is accepted once it is final). A redrive's run may come after
//     it: a step's open dead letter can still be redriven.
//   - with Params.WorkflowsConverge, every workflow's last stages reached
//     the highest version that passed all its earlier stages.
func (c *checker) checkWorkflows() {
	latest := c.latestRuns()
	eventRuns := map[uuid.UUID][]*dbRun{}
	for _, r := range c.db.runs {
		eventRuns[r.eventID] = append(eventRuns[r.eventID], r)
	}
	events := map[uuid.UUID]*dbEvent{}
	for _, e := range c.db.events {
		events[e.id] = e
	}
	seenEvent := map[uuid.UUID]bool{}
	for _, w := range c.db.workflowRuns {
		c.rep.WorkflowRuns++
		status := map[string]string{} // step name -> status
		for _, s := range w.steps {
			status[s.name] = s.state
			if s.state != "accepted" {
				if s.eventID != nil {
					c.fail("W", w.String(), "step %s is %s but has event %s", s.name, s.state, s.eventID)
				}
				continue
			}
			if s.eventID == nil {
				c.fail("W", w.String(), "step %s is accepted without an event", s.name)
				continue
			}
			seenEvent[*s.eventID] = true
			ev := events[*s.eventID]
			if ev == nil {
				c.fail("W", w.String(), "step %s names event %s, which does not exist", s.name, s.eventID)
				continue
			}
			if c.db.eventWorkflow[ev.id] != w.id {
				c.fail("W", w.String(), "step %s's event %s belongs to workflow run %s", s.name, ev, c.db.eventWorkflow[ev.id])
			}
			if ev.kind != s.kind || ev.resource != s.resource || ev.version != w.version {
				c.fail("W", w.String(), "step %s (%s %s) has event %s", s.name, s.kind, s.resource, ev)
			}
			if r := c.stepRun(w, s, latest[ev.id], eventRuns[ev.id]); r != nil {
				status[s.name] = r.status
			}
			for _, need := range s.needs {
				n := w.step(need)
				if n == nil || n.eventID == nil {
					c.fail("W", w.String(), "step %s was accepted but its need %s never was", s.name, need)
					continue
				}
				at := c.succeededAt(*n.eventID)
				if at == nil || at.After(ev.receivedAt) {
					c.fail("W", w.String(), "step %s was accepted at %s before its need %s succeeded (%v)",
						s.name, ev.receivedAt.Format(time.RFC3339Nano), need, at)
				}
			}
		}
		// Dependents of succeeded needs exist, unless the run was final first.
		for _, s := range w.steps {
			if s.state != "pending" && s.state != "skipped" || len(s.needs) == 0 {
				continue
			}
			var last *time.Time
			ready := true
			for _, need := range s.needs {
				n := w.step(need)
				if n == nil || n.eventID == nil {
					ready = false
					break
				}
				at := c.succeededAt(*n.eventID)
				if at == nil {
					ready = false
					break
				}
				if last == nil || at.After(*last) {
					last = at
				}
			}
			if ready && (w.finishedAt == nil || w.finishedAt.After(*last)) {
				c.fail("W", w.String(), "step %s is %s although its needs all succeeded (the last at %s) while the run was open",
					s.name, s.state, last.Format(time.RFC3339Nano))
			}
		}
		c.checkWorkflowStatus(w, status)
	}
	c.checkWorkflowCancels()
	for evID, wID := range c.db.eventWorkflow {
		// An event whose workflow run was pruned (and not put back by
		// CheckPruned) keeps its id alone (SPEC §13).
		if !seenEvent[evID] && c.db.workflowRuns[wID] != nil {
			c.fail("W", "", "event %s belongs to workflow run %s but to none of its steps", evID, wID)
		}
	}
	if c.p.WorkflowsConverge {
		c.checkWorkflowsConverged(latest)
	}
}

// stepRun is the run accepted step s of workflow run w shows (rule "W"),
// of its event's runs (latest the latest of them): the latest while w is
// open; once w is final, the run it had when w ended (final_run), every
// later run of the event being a redrive made after the end.
func (c *checker) stepRun(w *dbWorkflowRun, s *dbStep, latest *dbRun, runs []*dbRun) *dbRun {
	switch {
	case w.finishedAt == nil && s.finalRun != nil:
		c.fail("W", w.String(), "step %s keeps final run %d while its workflow run is open", s.name, *s.finalRun)
	case w.finishedAt != nil && s.finalRun == nil:
		c.fail("W", w.String(), "step %s has no final run although its workflow run ended at %s", s.name, w.finishedAt.Format(time.RFC3339Nano))
	}
	if s.finalRun == nil {
		return latest
	}
	var shown *dbRun
	for _, r := range runs {
		switch {
		case r.number == *s.finalRun:
			shown = r
		case r.number > *s.finalRun && !r.createdAt.After(*w.finishedAt):
			c.fail("W", w.String(), "step %s's final run is %d, but run %d of its event was created at %s, before the workflow run ended at %s",
				s.name, *s.finalRun, r.number, r.createdAt.Format(time.RFC3339Nano), w.finishedAt.Format(time.RFC3339Nano))
		}
	}
	if shown == nil && latest != nil {
		c.fail("W", w.String(), "step %s's final run %d does not exist", s.name, *s.finalRun)
	}
	return shown
}

// checkWorkflowCancels asserts that no step's first run of a workflow run
// an operator cancelled ended after the workflow run, or is still open.
func (c *checker) checkWorkflowCancels() {
	for _, r := range c.db.runs {
		w := c.db.workflowRuns[c.db.eventWorkflow[r.eventID]]
		if r.number != 1 || w == nil || !w.cancelledByOperator || w.finishedAt == nil {
			continue
		}
		if r.finishedAt == nil || r.finishedAt.After(*w.finishedAt) {
			ended := "not yet"
			if r.finishedAt != nil {
				ended = r.finishedAt.Format(time.RFC3339Nano)
			}
			c.fail("W", w.String(), "step run %s (%s@%d) ended %s (%s), after the workflow run was cancelled at %s",
				r.id, r.stream(), r.version, r.status, ended, w.finishedAt.Format(time.RFC3339Nano))
		}
	}
}

// checkWorkflowStatus compares w's status with its steps' statuses.
func (c *checker) checkWorkflowStatus(w *dbWorkflowRun, status map[string]string) {
	count := map[string]int{}
	for _, st := range status {
		count[st]++
	}
	final := w.finishedAt != nil
	if final != (w.status != "running" && w.status != "waiting" && !(w.status == "failed" && !final)) {
		c.fail("W", w.String(), "status %s with finished_at %v", w.status, w.finishedAt)
	}
	if final && count["pending"] > 0 {
		c.fail("W", w.String(), "final (%s) with %d pending steps", w.status, count["pending"])
	}
	if !final && count["skipped"] > 0 {
		c.fail("W", w.String(), "open (%s) with %d skipped steps", w.status, count["skipped"])
	}
	switch w.status {
	case "succeeded":
		if count["succeeded"] != len(w.steps) {
			c.fail("W", w.String(), "succeeded but its steps are %v", status)
		}
	case "superseded":
		if count["superseded"] == 0 {
			c.fail("W", w.String(), "superseded without a superseded step: %v", status)
		}
	case "failed":
		if count["failed"] == 0 {
			c.fail("W", w.String(), "failed without a failed step: %v", status)
		}
	case "running", "waiting":
		if count["succeeded"] == len(w.steps) {
			c.fail("W", w.String(), "%s but every step succeeded", w.status)
		}
		if count["superseded"] > 0 || count["cancelled"] > 0 {
			c.fail("W", w.String(), "%s with a superseded or cancelled step: %v", w.status, status)
		}
		// A step failed and nothing left to run: failed (SPEC §10), also
		// after a sibling's redrive had set it running.
		if count["held"]+count["queued"]+count["running"]+count["retrying"] == 0 {
			c.fail("W", w.String(), "%s with no step queued, running, retrying or held: %v", w.status, status)
		}
		// SPEC §10/§11: waiting exactly while some step is held and none
		// is queued, running or retrying.
		want := "running"
		if count["held"] > 0 && count["queued"]+count["running"]+count["retrying"] == 0 {
			want = "waiting"
		}
		if w.status != want {
			c.fail("W", w.String(), "%s, want %s for steps %v", w.status, want, status)
		}
	case "cancelled":
		if count["pending"] > 0 {
			c.fail("W", w.String(), "cancelled with pending steps: %v", status)
		}
	default:
		c.fail("W", w.String(), "unknown status %s", w.status)
	}
}

// checkWorkflowsConverged asserts that, for each workflow and resource,
// every step without dependents applied (at least) the highest version
// whose workflow run had every other step succeed.
func (c *checker) checkWorkflowsConverged(latest map[uuid.UUID]*dbRun) {
	type key struct{ workflow, resource string }
	best := map[key]*dbWorkflowRun{}
	for _, w := range c.db.workflowRuns {
		needed := map[string]bool{}
		for _, s := range w.steps {
			for _, n := range s.needs {
				needed[n] = true
			}
		}
		passed := true
		for _, s := range w.steps {
			if !needed[s.name] {
				continue
			}
			if s.eventID == nil || latest[*s.eventID] == nil || latest[*s.eventID].status != "succeeded" {
				passed = false
				break
			}
		}
		k := key{w.workflow, w.resource}
		if passed && (best[k] == nil || w.version > best[k].version) {
			best[k] = w
		}
	}
	for k, w := range best {
		for _, s := range w.steps {
			if slices.ContainsFunc(w.steps, func(o *dbStep) bool { return slices.Contains(o.needs, s.name) }) {
				continue
			}
			st := c.db.streams[s.kind+" "+s.resource]
			if st == nil || st.applied == nil || *st.applied < w.version {
				var applied any = "nothing"
				if st != nil && st.applied != nil {
					applied = *st.applied
				}
				c.fail("W", s.kind+" "+s.resource, "last stage %s of %s %s applied %v, below version %d which passed every earlier stage",
					s.name, k.workflow, k.resource, applied, w.version)
			}
		}
	}
}
