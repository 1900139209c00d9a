package api_test

import (
	"bytes"
	"fmt"
	"net/http"
	"testing"

	"github.com/google/uuid"
)

// TestHookReplayFirstAnswer: an accepted or ignored delivery sent again is
// answered 200 with the bytes of its first answer, also after its event
// and workflow run have moved on (cancelled here), and for copies sent at
// the same moment; a row recorded before answers were kept (answer_body
// NULL) is answered with its event read again.
func TestHookReplayFirstAnswer(t *testing.T) {
	t.Parallel()
	s := hookStack(t)
	repo := hookRepo()

	id := uuid.NewString()
	body := githubPush(repo, "refs/heads/main", "abc")
	first := ghPost(t, s, "push", id, hookGitHubSecret, body)
	evWantStatus(t, first, http.StatusAccepted)
	ev := first.json(t)["accepted"].([]any)[0].(map[string]any)["event"].(map[string]any)
	if ev["status"] != "queued" {
		t.Fatalf("first answer's event status %v, want queued", ev["status"])
	}
	var runID uuid.UUID
	if err := s.pool.QueryRow(t.Context(), `SELECT id FROM converge_runs WHERE event_id = $1`, ev["id"]).Scan(&runID); err != nil {
		t.Fatal(err)
	}
	evWantStatus(t, s.do(t, http.MethodPost, "/v1/runs/"+runID.String()+"/cancel", nil, nil), http.StatusOK)

	again := ghPost(t, s, "push", id, hookGitHubSecret, body)
	evWantStatus(t, again, http.StatusOK)
	if !bytes.Equal(again.body, first.body) {
		t.Errorf("replay answered\n%s\nwant the first answer\n%s", again.body, first.body)
	}
	if ct := again.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("replay Content-Type %q", ct)
	}
	// The body echoes the sender's payload: never sniffed as HTML, as
	// every other JSON answer.
	for name, r := range map[string]*evResponse{"202": first, "replay 200": again} {
		if got := r.header.Get("X-Content-Type-Options"); got != "nosniff" {
			t.Errorf("%s: X-Content-Type-Options %q, want nosniff", name, got)
		}
	}

	// A workflow rule, and copies at once: every 200 is the 202's bytes.
	rel := fmt.Appendf(nil, `{"action": "published", "repository": {"full_name": %q}}`, repo)
	relID := uuid.NewString()
	answers := make([]*evResponse, 4)
	hookConcurrently(t, 4, func(i int) *evResponse {
		answers[i] = ghPost(t, s, "release", relID, hookGitHubSecret, rel)
		return answers[i]
	})
	var accepted *evResponse
	for _, a := range answers {
		if a.status == http.StatusAccepted {
			accepted = a
		}
	}
	if accepted == nil {
		t.Fatalf("no copy answered 202")
	}
	for i, a := range answers {
		if a.status != http.StatusAccepted && (a.status != http.StatusOK || !bytes.Equal(a.body, accepted.body)) {
			t.Errorf("copy %d: %d %s, want 200 with the 202's bytes %s", i, a.status, a.body, accepted.body)
		}
	}

	// Ignored: the same bytes too.
	ignID := uuid.NewString()
	ign := githubPush(repo, "refs/heads/dev", "d")
	firstIgn := ghPost(t, s, "push", ignID, hookGitHubSecret, ign)
	evWantStatus(t, firstIgn, http.StatusAccepted)
	againIgn := ghPost(t, s, "push", ignID, hookGitHubSecret, ign)
	evWantStatus(t, againIgn, http.StatusOK)
	if !bytes.Equal(againIgn.body, firstIgn.body) {
		t.Errorf("ignored replay %s, want %s", againIgn.body, firstIgn.body)
	}

	// A row without a kept answer is answered as before: its event as it
	// is now (cancelled).
	if _, err := s.pool.Exec(t.Context(), `UPDATE converge_deliveries SET answer_body = NULL WHERE source = 'github' AND delivery_id = $1`, id); err != nil {
		t.Fatal(err)
	}
	old := ghPost(t, s, "push", id, hookGitHubSecret, body)
	evWantStatus(t, old, http.StatusOK)
	oldEv := old.json(t)["accepted"].([]any)[0].(map[string]any)["event"].(map[string]any)
	if got := old.header.Get("X-Content-Type-Options"); got != "nosniff" {
		t.Errorf("replay without a kept answer: X-Content-Type-Options %q, want nosniff", got)
	}
	if oldEv["id"] != ev["id"] || oldEv["status"] == "queued" {
		t.Errorf("replay without a kept answer: event %v, want %v read again (no longer queued)", oldEv, ev["id"])
	}
}
