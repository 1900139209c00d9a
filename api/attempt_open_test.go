package api_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/converge-run/converge"
)

// TestOpenAttemptOutcomeNull: an attempt still in flight shows outcome null
// (SPEC §2 and §5 name only succeeded, transient_error, permanent_error,
// cancelled, abandoned), with finished_at null, in GET /v1/events/{id} and in
// the answer of POST /v1/runs/{id}/cancel for the running run.
func TestOpenAttemptOutcomeNull(t *testing.T) {
	t.Parallel()
	s := evNewStack(t, "")
	ctx := t.Context()
	r := s.post(t, evBody("build", "open/web", 1, ""))
	evWantStatus(t, r, http.StatusAccepted)
	var acc converge.EventAcceptResult
	if err := json.Unmarshal(r.body, &acc); err != nil {
		t.Fatal(err)
	}
	var jobID int64
	if err := s.pool.QueryRow(ctx, `SELECT job_id FROM converge_runs WHERE id = $1`, acc.Run.ID).Scan(&jobID); err != nil {
		t.Fatalf("job id: %v", err)
	}
	ticket, err := s.store.AttemptBegin(ctx, acc.Run.ID, jobID, time.Minute)
	if err != nil || ticket.Decision != converge.DecisionCall {
		t.Fatalf("AttemptBegin: %+v, %v", ticket, err)
	}
	openAttempt := func(what string, run map[string]any) {
		t.Helper()
		hist, _ := run["attempt_history"].([]any)
		if len(hist) != 1 {
			t.Fatalf("%s: attempt_history %v, want one attempt", what, run["attempt_history"])
		}
		a := hist[0].(map[string]any)
		outcome, ok := a["outcome"]
		if !ok || outcome != nil {
			t.Errorf("%s: open attempt's outcome %#v (present %v), want null", what, outcome, ok)
		}
		if f, ok := a["finished_at"]; !ok || f != nil {
			t.Errorf("%s: open attempt's finished_at %#v, want null", what, f)
		}
	}
	g := s.get(t, "/v1/events/"+acc.Event.ID.String())
	evWantStatus(t, g, http.StatusOK)
	runs, _ := g.json(t)["runs"].([]any)
	if len(runs) != 1 {
		t.Fatalf("runs %s", g.body)
	}
	openAttempt("GET event", runs[0].(map[string]any))

	c := s.do(t, http.MethodPost, "/v1/runs/"+acc.Run.ID.String()+"/cancel", nil, nil)
	evWantStatus(t, c, http.StatusOK)
	openAttempt("cancel answer", c.json(t))
}
