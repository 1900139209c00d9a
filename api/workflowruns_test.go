package api_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
)

// wfPost starts a workflow run through POST /v1/workflow-runs.
func (s *evStack) wfPost(t *testing.T, body string) *evResponse {
	t.Helper()
	return s.do(t, http.MethodPost, "/v1/workflow-runs", strings.NewReader(body), map[string]string{"Content-Type": "application/json"})
}

func TestWorkflowRunCreate(t *testing.T) {
	t.Parallel()
	s := evNewStack(t, "")
	resource := "app/" + uuid.NewString()
	r := s.wfPost(t, `{"workflow":"release","resource":"`+resource+`","version":3,"payload":{"sha":"abc"}}`)
	evWantStatus(t, r, http.StatusAccepted)
	var res struct {
		WorkflowRun map[string]json.RawMessage `json:"workflow_run"`
	}
	if err := json.Unmarshal(r.body, &res); err != nil {
		t.Fatal(err)
	}
	wantKeys(t, "workflow_run", res.WorkflowRun, "id", "workflow", "resource", "version", "status", "payload", "steps", "created_at", "finished_at", "trace_id")
	// Tracing is off in this process: no trace.
	if got := string(res.WorkflowRun["trace_id"]); got != "null" {
		t.Errorf("workflow_run.trace_id = %s, want null (tracing off)", got)
	}
	var steps []map[string]json.RawMessage
	if err := json.Unmarshal(res.WorkflowRun["steps"], &steps); err != nil || len(steps) != 4 {
		t.Fatalf("steps: %v, %s", err, res.WorkflowRun["steps"])
	}
	wantKeys(t, "step", steps[0], "name", "kind", "resource", "needs", "status", "event_id", "run_id")
	for i, want := range []string{`"build" "queued"`, `"canary" "pending"`, `"staging" "pending"`, `"prod" "pending"`} {
		if got := string(steps[i]["name"]) + " " + string(steps[i]["status"]); got != want {
			t.Errorf("step %d = %s, want %s", i, got, want)
		}
	}
	if got := string(steps[3]["resource"]); got != `"prod/`+resource+`"` {
		t.Errorf("prod resource = %s", got)
	}
	var id string
	_ = json.Unmarshal(res.WorkflowRun["id"], &id)

	// The build step's event names its workflow run.
	var eventID string
	_ = json.Unmarshal(steps[0]["event_id"], &eventID)
	ev := s.get(t, "/v1/events/"+eventID)
	evWantStatus(t, ev, http.StatusOK)
	if got := ev.json(t)["workflow_run_id"]; got != id {
		t.Errorf("event's workflow_run_id = %v, want %s", got, id)
	}

	// Replay, conflict, stale.
	replay := s.wfPost(t, `{"workflow":"release","resource":"`+resource+`","version":3,"payload":{"sha": "abc"}}`)
	evWantStatus(t, replay, http.StatusOK)
	if !strings.Contains(string(replay.body), id) {
		t.Errorf("replay answered another run: %s", replay.body)
	}
	evWantProblem(t, s.wfPost(t, `{"workflow":"release","resource":"`+resource+`","version":3,"payload":{"sha":"def"}}`), http.StatusConflict, "version-conflict")
	p := evWantProblem(t, s.wfPost(t, `{"workflow":"release","resource":"`+resource+`","version":2}`), http.StatusConflict, "stale-version")
	if p["latest_version"] != float64(3) {
		t.Errorf("latest_version = %v, want 3", p["latest_version"])
	}
	// A root step's stream at the version: stale, naming that stream's version.
	evWantStatus(t, s.post(t, `{"kind":"build","resource":"web/`+resource+`","version":9}`), http.StatusAccepted)
	p = evWantProblem(t, s.wfPost(t, `{"workflow":"release","resource":"web/`+resource+`","version":9}`), http.StatusConflict, "stale-version")
	if p["latest_version"] != float64(9) {
		t.Errorf("latest_version = %v, want 9", p["latest_version"])
	}

	// Bad input.
	for _, tc := range []struct {
		body, field string
	}{
		{`{"workflow":"nope","resource":"x","version":1}`, "workflow"},
		{`{"resource":"x","version":1}`, "workflow"},
		{`{"workflow":"release","resource":"/x","version":1}`, "resource"},
		{`{"workflow":"release","resource":"x","version":0}`, "version"},
		{`{"workflow":"release","resource":"x","version":1,"payload":[1]}`, "payload"},
		{`{"workflow":"release","resource":"` + strings.Repeat("a", 195) + `","version":1}`, "resource"},
		{`{"workflow":"release","resource":"x","version":1,"extra":1}`, "extra"},
	} {
		p := evWantProblem(t, s.wfPost(t, tc.body), http.StatusUnprocessableEntity, "invalid-request")
		if !strings.Contains(string(mustJSON(t, p["errors"])), `"field":"`+tc.field+`"`) {
			t.Errorf("%s: errors %v do not name %s", tc.body, p["errors"], tc.field)
		}
	}
	evWantProblem(t, s.wfPost(t, `{"workflow":"release",`), http.StatusBadRequest, "malformed-json")
	evWantProblem(t, s.do(t, http.MethodPost, "/v1/workflow-runs", strings.NewReader(`{}`), map[string]string{"Content-Type": "text/plain"}),
		http.StatusUnsupportedMediaType, "unsupported-media-type")

	// Get, list, cancel.
	evWantStatus(t, s.get(t, "/v1/workflow-runs/"+id), http.StatusOK)
	evWantProblem(t, s.get(t, "/v1/workflow-runs/"+uuid.NewString()), http.StatusNotFound, "not-found")
	list := s.get(t, "/v1/workflow-runs?workflow=release&resource="+resource+"&status=running&limit=1")
	evWantStatus(t, list, http.StatusOK)
	if items := list.json(t)["items"].([]any); len(items) != 1 || items[0].(map[string]any)["id"] != id {
		t.Errorf("list = %s", list.body)
	}
	evWantProblem(t, s.get(t, "/v1/workflow-runs?status=done"), http.StatusUnprocessableEntity, "invalid-request")
	evWantProblem(t, s.get(t, "/v1/workflow-runs?workflow=Bad%20Name"), http.StatusUnprocessableEntity, "invalid-request")
	c := s.do(t, http.MethodPost, "/v1/workflow-runs/"+id+"/cancel", strings.NewReader(`{"reason":"not today"}`), map[string]string{"Content-Type": "application/json"})
	evWantStatus(t, c, http.StatusOK)
	if got := c.json(t)["status"]; got != "cancelled" {
		t.Errorf("cancelled run's status = %v", got)
	}
	evWantProblem(t, s.do(t, http.MethodPost, "/v1/workflow-runs/"+id+"/cancel", nil, nil), http.StatusConflict, "run-finished")
	audit := s.get(t, "/v1/audit")
	if !strings.Contains(string(audit.body), `"workflow_run.cancel"`) || !strings.Contains(string(audit.body), `"not today"`) {
		t.Errorf("audit has no workflow_run.cancel entry with its reason: %s", audit.body)
	}
	// Each entry says when under both names: at, and SPEC §4's time.
	var page struct {
		Items []map[string]any `json:"items"`
	}
	if err := json.Unmarshal(audit.body, &page); err != nil || len(page.Items) == 0 {
		t.Fatalf("audit page %s: %v", audit.body, err)
	}
	for _, e := range page.Items {
		at, _ := e["at"].(string)
		if _, err := time.Parse(time.RFC3339, at); err != nil || e["time"] != at {
			t.Errorf("audit entry at %v, time %v: want one RFC 3339 instant under both", e["at"], e["time"])
		}
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
