package ui_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/store"
)

// releaseDef is SPEC §10's release workflow over kinds no worker of the
// stack serves (image, rollout), so that its steps stay where a test puts
// them: build, then staging and canary, then prod.
func releaseDef(t *testing.T) *converge.Workflow {
	t.Helper()
	def, err := converge.NewWorkflow("release", map[string]*converge.WorkflowStep{
		"build":   {Kind: "image"},
		"staging": {Kind: "rollout", Resource: "staging/{resource}", Needs: []string{"build"}},
		"canary":  {Kind: "rollout", Resource: "canary/{resource}", Needs: []string{"build"}},
		"prod":    {Kind: "rollout", Resource: "prod/{resource}", Needs: []string{"staging", "canary"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return def
}

// workflowStart starts a release workflow run of resource at version.
func (s *stack) workflowStart(t *testing.T, resource string, version int64) uuid.UUID {
	t.Helper()
	res, err := s.st.WorkflowRunStart(t.Context(), store.WorkflowRunStartParams{
		WorkflowRunStart: converge.WorkflowRunStart{Workflow: "release", Resource: resource, Version: version,
			Payload: json.RawMessage(`{"commit":"3f9c2ab","image":"registry.local/` + resource + `"}`)},
		Definition: releaseDef(t),
		Policies:   map[string]store.StepPolicy{"image": {MaxAttempts: 1}, "rollout": {MaxAttempts: 1}},
	})
	if err != nil {
		t.Fatalf("start workflow run %s@%d: %v", resource, version, err)
	}
	return res.WorkflowRun.ID
}

// workflowStep returns step name of workflow run id.
func (s *stack) workflowStep(t *testing.T, id uuid.UUID, name string) *converge.WorkflowRunStep {
	t.Helper()
	w, err := s.st.WorkflowRunGet(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range w.Steps {
		if st.Name == name {
			return st
		}
	}
	t.Fatalf("workflow run %s has no step %s", id, name)
	return nil
}

// stepBegin begins an attempt of step name's run, as a worker would,
// and returns the ticket.
func (s *stack) stepBegin(t *testing.T, id uuid.UUID, name string) *converge.AttemptTicket {
	t.Helper()
	st := s.workflowStep(t, id, name)
	if st.RunID == nil {
		t.Fatalf("step %s of %s has no run", name, id)
	}
	var job int64
	if err := s.pool.QueryRow(t.Context(), `SELECT job_id FROM converge_runs WHERE id = $1`, *st.RunID).Scan(&job); err != nil {
		t.Fatal(err)
	}
	tk, err := s.st.AttemptBegin(t.Context(), *st.RunID, job, time.Minute)
	if err != nil || tk.Decision != converge.DecisionCall {
		t.Fatalf("begin %s: %v, %+v", name, err, tk)
	}
	return tk
}

// stepFinish begins and finishes an attempt of step name: a success with
// output when fail is nil.
func (s *stack) stepFinish(t *testing.T, id uuid.UUID, name, output string, fail *converge.Error) {
	t.Helper()
	tk := s.stepBegin(t, id, name)
	var out json.RawMessage
	if output != "" {
		out = json.RawMessage(output)
	}
	if _, err := s.st.AttemptFinish(t.Context(), store.AttemptFinishParams{Run: tk.Run, Attempt: tk.Attempt, Started: time.Now(),
		Err: fail, Output: out, Backoff: converge.Backoff{Initial: time.Millisecond, Max: time.Millisecond}}); err != nil {
		t.Fatalf("finish %s: %v", name, err)
	}
}

// mixedWorkflowRun starts a fan-out/fan-in run of resource in mixed
// states: build succeeded, canary running, staging queued, prod pending.
func (s *stack) mixedWorkflowRun(t *testing.T, resource string, version int64) uuid.UUID {
	t.Helper()
	id := s.workflowStart(t, resource, version)
	s.stepFinish(t, id, "build", `{"image":"registry.local/`+resource+`","digest":"sha256:9e1f03"}`, nil)
	s.stepBegin(t, id, "canary")
	return id
}

// TestWorkflowRunsHTTP checks the workflow run pages: the list's filters
// (checked by the API's parser), the graph, and the cancel action's roles.
func TestWorkflowRunsHTTP(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	mixed := s.mixedWorkflowRun(t, "shop/web", 7)
	failed := s.workflowStart(t, "shop/api", 3)
	s.stepFinish(t, failed, "build", "", &converge.Error{Class: converge.ClassPermanent, Message: "manifest invalid"})

	op := newClient(t, s.srv.URL)
	op.signIn(s.operator)

	t.Run("list", func(t *testing.T) {
		resp, body := op.get("/ui/workflow-runs")
		wantStatus(t, "list", resp, body, http.StatusOK)
		wantContains(t, "list", body, "/ui/workflow-runs/"+mixed.String(), "/ui/workflow-runs/"+failed.String(),
			"shop/web", "shop/api", ">1/4<", ">0/4<", `href="/ui/workflow-runs" aria-current="page"`)
		if n := strings.Count(body, `data-testid="workflow-run-row"`); n != 2 {
			t.Errorf("%d rows, want 2", n)
		}
		for _, c := range []struct {
			query string
			want  uuid.UUID
		}{
			{"workflow=release&resource=shop%2Fweb", mixed},
			{"status=failed", failed},
			{"status=running&limit=25", mixed},
		} {
			resp, body := op.get("/ui/workflow-runs?" + c.query)
			wantStatus(t, c.query, resp, body, http.StatusOK)
			if n := strings.Count(body, `data-testid="workflow-run-row"`); n != 1 || !strings.Contains(body, c.want.String()) {
				t.Errorf("%s: %d rows, want only %s", c.query, n, c.want)
			}
		}
		resp, body = op.get("/ui/workflow-runs?workflow=nope")
		wantStatus(t, "unknown workflow", resp, body, http.StatusOK)
		wantContains(t, "unknown workflow", body, "No workflow runs match.")
		// One a page: the next page has the other, and a way back.
		resp, body = op.get("/ui/workflow-runs?limit=1")
		wantStatus(t, "page 1", resp, body, http.StatusOK)
		i := strings.Index(body, `href="/ui/workflow-runs?`)
		j := strings.Index(body, `" data-testid="next-page"`)
		if i < 0 || j < i {
			t.Fatalf("no next page link:\n%s", body)
		}
		next := strings.ReplaceAll(body[i+len(`href="`):j], "&amp;", "&")
		resp, body = op.get(next)
		wantStatus(t, "page 2", resp, body, http.StatusOK)
		wantContains(t, "page 2", body, mixed.String(), "« First page")
		// What the API refuses, the dashboard refuses with its message.
		for _, c := range []struct{ query, msg string }{
			{"status=bogus", "must be one of running, waiting, succeeded, failed, superseded, cancelled"},
			{"workflow=Bad%20Name", "is not a workflow name"},
			{"limit=0", "must be an integer from 1 to 500"},
			{"cursor=zzz", "is not a cursor this server made; start from the first page"},
			{"colour=red", "is not a known query parameter"},
		} {
			resp, body := op.get("/ui/workflow-runs?" + c.query)
			wantStatus(t, c.query, resp, body, http.StatusUnprocessableEntity)
			wantContains(t, c.query, body, c.msg)
		}
	})

	t.Run("graph", func(t *testing.T) {
		resp, body := op.get("/ui/workflow-runs/" + mixed.String())
		wantStatus(t, "workflow run", resp, body, http.StatusOK)
		wantContains(t, "workflow run", body, `data-testid="workflow-graph"`, "Cancel workflow run",
			`action="/ui/workflow-runs/`+mixed.String()+`/cancel"`, `name="csrf_token"`)
		for name, status := range map[string]string{"build": "succeeded", "staging": "queued", "canary": "running", "prod": "pending"} {
			wantContains(t, name, body, `data-step="`+name+`" data-status="`+status+`"`)
			st := s.workflowStep(t, mixed, name)
			if st.EventID != nil {
				wantContains(t, name, body, `href="/ui/events/`+st.EventID.String()+`"`,
					`href="/ui/events/`+st.EventID.String()+`#run-`+st.RunID.String()+`"`)
			}
		}
		// Four edges: build to staging and canary, both to prod; the
		// first two drawn as done.
		for _, e := range []string{`data-from="build" data-to="staging"`, `data-from="build" data-to="canary"`,
			`data-from="staging" data-to="prod"`, `data-from="canary" data-to="prod"`} {
			wantContains(t, "edges", body, e)
		}
		if n := strings.Count(body, `class="wf-edge done"`); n != 2 {
			t.Errorf("%d done edges, want 2", n)
		}
		// A failed step links its dead letter.
		dl := s.deadLetter(t, "image", "shop/api")
		resp, body = op.get("/ui/workflow-runs/" + failed.String())
		wantStatus(t, "failed workflow run", resp, body, http.StatusOK)
		wantContains(t, "failed workflow run", body, `href="/ui/dead-letters/`+dl.ID.String()+`"`, `data-status="failed"`)
		// The step's event and its stream's history name the workflow run.
		build := s.workflowStep(t, mixed, "build")
		resp, body = op.get("/ui/events/" + build.EventID.String())
		wantStatus(t, "event", resp, body, http.StatusOK)
		wantContains(t, "event", body, `href="/ui/workflow-runs/`+mixed.String()+`"`, "workflow run "+mixed.String()[24:])
		resp, body = op.get("/ui/streams/image/shop/web")
		wantStatus(t, "stream", resp, body, http.StatusOK)
		wantContains(t, "stream", body, `data-testid="history-workflow-run"`, `href="/ui/workflow-runs/`+mixed.String()+`"`)
		resp, body = op.get("/ui/workflow-runs/" + uuid.NewString())
		wantStatus(t, "unknown workflow run", resp, body, http.StatusNotFound)
		resp, body = op.get("/ui/workflow-runs/not-a-uuid")
		wantStatus(t, "bad id", resp, body, http.StatusNotFound)
	})

	t.Run("viewer", func(t *testing.T) {
		c := newClient(t, s.srv.URL)
		c.signIn(s.viewer)
		resp, body := c.get("/ui/workflow-runs/" + mixed.String())
		wantStatus(t, "viewer page", resp, body, http.StatusOK)
		wantContains(t, "viewer page", body, `data-testid="workflow-graph"`)
		if strings.Contains(body, "/cancel\"") || strings.Contains(body, "Cancel workflow run") {
			t.Errorf("viewer sees the cancel button")
		}
		// A forged post, with the viewer's own form token, is refused.
		resp, body = c.do(http.MethodPost, "/ui/workflow-runs/"+mixed.String()+"/cancel",
			url.Values{"csrf_token": {c.formToken()}, "reason": {"forged"}}, sameOrigin)
		wantStatus(t, "viewer cancel", resp, body, http.StatusForbidden)
		if w, err := s.st.WorkflowRunGet(t.Context(), mixed); err != nil || w.Status != converge.WorkflowRunning {
			t.Fatalf("after the viewer's post: %v %v, want running", w.Status, err)
		}
	})

	t.Run("operator cancel", func(t *testing.T) {
		path := "/ui/workflow-runs/" + mixed.String() + "/cancel"
		resp, body := op.do(http.MethodPost, path, url.Values{"reason": {"no token"}}, sameOrigin)
		wantStatus(t, "no form token", resp, body, http.StatusForbidden)
		resp, body = op.do(http.MethodPost, path, url.Values{"csrf_token": {op.formToken()}, "reason": {"bad build"}},
			http.Header{"Sec-Fetch-Site": {"cross-site"}})
		wantStatus(t, "cross-site", resp, body, http.StatusForbidden)

		resp, body = op.do(http.MethodPost, path, url.Values{"csrf_token": {op.formToken()}, "reason": {"bad build"}}, sameOrigin)
		wantStatus(t, "cancel", resp, body, http.StatusSeeOther)
		if got := resp.Header.Get("Location"); got != "/ui/workflow-runs/"+mixed.String() {
			t.Fatalf("redirect to %q", got)
		}
		w, err := s.st.WorkflowRunGet(t.Context(), mixed)
		if err != nil || w.Status != converge.WorkflowCancelled || w.FinishedAt == nil {
			t.Fatalf("after cancel: %+v %v", w, err)
		}
		a := s.auditActions(t)[0]
		if a.Action != "workflow_run.cancel" || a.Actor != "oncall" || a.Role != "operator" || a.Reason != "bad build" {
			t.Errorf("audit entry %+v", a)
		}
		resp, body = op.get("/ui/workflow-runs/" + mixed.String())
		wantStatus(t, "after cancel", resp, body, http.StatusOK)
		wantContains(t, "after cancel", body, "Workflow run cancelled.", `data-step="prod" data-status="skipped"`)
		if strings.Contains(body, "Cancel workflow run") {
			t.Errorf("a final workflow run still offers cancel")
		}
		// Cancelling again is a conflict, shown as a flash.
		resp, body = op.do(http.MethodPost, path, url.Values{"csrf_token": {op.formToken()}}, sameOrigin)
		wantStatus(t, "cancel again", resp, body, http.StatusSeeOther)
		_, body = op.get("/ui/workflow-runs/" + mixed.String())
		wantContains(t, "cancel again", body, `class="flash flash-error"`, "This workflow run is already final: nothing was cancelled.")
		resp, body = op.get("/ui/workflow-runs?status=cancelled")
		wantStatus(t, "cancelled filter", resp, body, http.StatusOK)
		wantContains(t, "cancelled filter", body, mixed.String())

		// The cancel is on the history of each step's stream and on each
		// step's event page, with who and why (its audit entry names the
		// workflow run, not the step runs).
		for _, st := range w.Steps {
			if st.EventID == nil {
				continue
			}
			resp, body = op.get("/ui/streams/" + st.Kind + "/" + st.Resource)
			wantStatus(t, "stream of step "+st.Name, resp, body, http.StatusOK)
			wantContains(t, "stream of step "+st.Name, body, "Workflow run cancelled by an operator", "by oncall: bad build")
			resp, body = op.get("/ui/events/" + st.EventID.String())
			wantStatus(t, "event of step "+st.Name, resp, body, http.StatusOK)
			wantContains(t, "event of step "+st.Name, body, "Workflow run cancelled by an operator", "by oncall: bad build")
		}
	})
}
