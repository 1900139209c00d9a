package ui_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/store"
)

// TestDashboardRedriveKindNotServed: the dashboard's redrive of a dead
// letter whose kind is no longer configured shows why it was refused
// (kind-not-served) and changes nothing.
func TestDashboardRedriveKindNotServed(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	ctx := t.Context()
	// A dead letter of kind "retired", which the stack does not configure
	// (as after the kind was removed from the configuration).
	res, err := s.st.EventAccept(ctx, store.EventAcceptParams{
		EventSubmission: converge.EventSubmission{Kind: "retired", Resource: "app/old", Version: 1, Payload: json.RawMessage(`{}`)}, MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	var job int64
	if err := s.pool.QueryRow(ctx, `SELECT job_id FROM converge_runs WHERE id = $1`, res.Run.ID).Scan(&job); err != nil {
		t.Fatal(err)
	}
	tk, err := s.st.AttemptBegin(ctx, res.Run.ID, job, time.Minute)
	if err != nil || tk.Decision != converge.DecisionCall {
		t.Fatalf("begin: %+v %v", tk, err)
	}
	if _, err := s.st.AttemptFinish(ctx, store.AttemptFinishParams{Run: tk.Run, Attempt: tk.Attempt, Started: time.Now(),
		Err: &converge.Error{Class: converge.ClassPermanent, Message: "gone"}}); err != nil {
		t.Fatal(err)
	}
	var id uuid.UUID
	if err := s.pool.QueryRow(ctx, `SELECT id FROM converge_dead_letters WHERE run_id = $1`, res.Run.ID).Scan(&id); err != nil {
		t.Fatal(err)
	}

	c := newClient(t, s.srv.URL)
	c.signIn(s.operator)
	page := "/ui/dead-letters/" + id.String()
	resp, body := c.do(http.MethodPost, page+"/redrive", url.Values{"csrf_token": {c.formToken()}}, sameOrigin)
	wantStatus(t, "redrive", resp, body, http.StatusSeeOther)
	if got := resp.Header.Get("Location"); got != page {
		t.Fatalf("redirect to %q, want %q", got, page)
	}
	resp, body = c.get(page)
	wantStatus(t, "dead letter page", resp, body, http.StatusOK)
	wantContains(t, "dead letter page", body, "is not configured any more")
	if got, _ := s.st.DeadLetterGet(ctx, id); got.Status != converge.DeadLetterOpen {
		t.Fatalf("dead letter %s, want open", got.Status)
	}
}
