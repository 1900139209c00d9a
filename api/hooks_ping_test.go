package api_test

import (
	"bytes"
	"net/http"
	"testing"

	"github.com/google/uuid"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/source"
)

// TestHookGitHubPing: GitHub's ping is a delivery as any other (SPEC
// §12): evaluated against the rules, answered 202 ignored with accepted
// [] and its delivery row when none matches, and 200 with the first answer
// when sent again; counted in converge_deliveries_total once. A rule that
// matches the ping starts what it maps it to.
func TestHookGitHubPing(t *testing.T) {
	t.Parallel()
	defs := []converge.SourceDef{
		{Name: "github", Type: converge.SourceGitHub, Secret: hookGitHubSecret, Rules: []converge.SourceRule{
			{When: `headers["x-github-event"] == "push"`, Kind: "build", Resource: `body.repository.full_name`, Version: "auto"},
		}},
		{Name: "pinged", Type: converge.SourceGitHub, Secret: hookGitHubSecret, Rules: []converge.SourceRule{
			{When: `headers["x-github-event"] == "ping"`, Kind: "build", Resource: `"ping/" + string(int(body.hook_id))`, Version: "auto"},
		}},
	}
	s := hookStackWith(t, 0, defs)
	body := []byte(`{"zen": "Keep it logically awesome.", "hook_id": 489201733}`)
	id := uuid.NewString()
	first := ghPost(t, s, "ping", id, hookGitHubSecret, body)
	evWantStatus(t, first, http.StatusAccepted)
	m := first.json(t)
	d, _ := m["delivery"].(map[string]any)
	acc, ok := m["accepted"].([]any)
	if d == nil || d["status"] != "ignored" || d["delivery_id"] != id || !ok || len(acc) != 0 {
		t.Errorf("ping: %s, want 202 ignored with accepted []", first.body)
	}
	if n := hookDeliveries(t, s, id); n != 1 {
		t.Errorf("ping wrote %d delivery rows, want 1", n)
	}
	again := ghPost(t, s, "ping", id, hookGitHubSecret, body)
	evWantStatus(t, again, http.StatusOK)
	if !bytes.Equal(again.body, first.body) {
		t.Errorf("ping sent again: %s, want the first answer %s", again.body, first.body)
	}
	if n := hookDeliveries(t, s, id); n != 1 {
		t.Errorf("ping sent twice: %d delivery rows, want 1", n)
	}
	if got := metricValue(s.get(t, "/metrics").body, `converge_deliveries_total{source="github",status="ignored"}`); got != "1" {
		t.Errorf(`converge_deliveries_total{source="github",status="ignored"} = %q, want 1 (the ping, once)`, got)
	}

	// A rule may match a ping.
	pinged := []byte(`{"zen": "Design for failure.", "hook_id": 7}`)
	r := s.do(t, http.MethodPost, "/hooks/pinged", bytes.NewReader(pinged), map[string]string{"Authorization": "", "Content-Type": "application/json",
		"X-GitHub-Event": "ping", "X-GitHub-Delivery": uuid.NewString(), "X-Hub-Signature-256": source.SignGitHub([]byte(hookGitHubSecret), pinged)})
	evWantStatus(t, r, http.StatusAccepted)
	if m := r.json(t); m["delivery"].(map[string]any)["status"] != "accepted" || hookEvents(t, s, "ping/7") != 1 {
		t.Errorf("a ping matched by a rule: %s, want accepted with its event", r.body)
	}
}
