package api_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/converge-run/converge/api"
)

// TestHookRateLimit: with rate_limit, each source takes that many
// deliveries a window from one client address (SPEC §4); beyond it the
// answer is a 429 problem with Retry-After and the RateLimit-* fields,
// checked before the signature, and nothing is written. Another source's
// budget is its own.
func TestHookRateLimit(t *testing.T) {
	t.Parallel()
	s := hookStackLimited(t, 2)
	repo := hookRepo()
	for i := range 2 {
		r := ghPost(t, s, "push", uuid.NewString(), hookGitHubSecret, githubPush(repo, "refs/heads/main", "sha"+strconv.Itoa(i)))
		if r.status != http.StatusAccepted {
			t.Fatalf("delivery %d: %d %s", i, r.status, r.body)
		}
		if got := r.header.Get("RateLimit-Remaining"); got != strconv.Itoa(1-i) {
			t.Errorf("delivery %d: RateLimit-Remaining %q, want %d", i, got, 1-i)
		}
	}
	over := uuid.NewString()
	r := ghPost(t, s, "push", over, hookGitHubSecret, githubPush(repo, "refs/heads/main", "sha-over"))
	if r.status != http.StatusTooManyRequests {
		t.Fatalf("third delivery: %d %s, want 429", r.status, r.body)
	}
	retry, err := strconv.Atoi(r.header.Get("Retry-After"))
	if err != nil || retry < 1 || retry > 60 {
		t.Errorf("Retry-After %q, want 1..60 seconds", r.header.Get("Retry-After"))
	}
	if r.header.Get("RateLimit-Limit") != "2" || r.header.Get("RateLimit-Remaining") != "0" || r.header.Get("RateLimit-Reset") == "" {
		t.Errorf("RateLimit headers: %v", r.header)
	}
	var p api.Problem
	if r.header.Get("Content-Type") != "application/problem+json" || json.Unmarshal(r.body, &p) != nil || p.Type != api.ProblemType("rate-limited") {
		t.Errorf("429 body %s, want a rate-limited problem", r.body)
	}
	// Counted as a rejected event of no kind yet, as POST /v1/events
	// counts its 429 (SPEC §14).
	if got := metricValue(s.get(t, "/metrics").body, `converge_events_rejected_total{kind="unknown",reason="rate-limited"}`); got != "1" {
		t.Errorf(`converge_events_rejected_total{kind="unknown",reason="rate-limited"} = %q after one 429, want 1`, got)
	}
	// Refused before its signature is checked: a forged one is a 429 too.
	if r := ghPost(t, s, "push", uuid.NewString(), "wrong secret", githubPush(repo, "refs/heads/main", "forged")); r.status != http.StatusTooManyRequests {
		t.Errorf("forged delivery over the limit: %d, want 429", r.status)
	}
	if n := hookDeliveries(t, s, over); n != 0 {
		t.Errorf("a refused delivery wrote %d delivery rows", n)
	}
	if n := hookEvents(t, s, repo); n != 2 {
		t.Errorf("%d events of %s, want the 2 accepted", n, repo)
	}
	// The registry source has a budget of its own.
	body := []byte(`{"specversion":"1.0","id":"` + uuid.NewString() + `","source":"reg","type":"image.pushed","datacontenttype":"application/json","data":{"repository":"` + uuid.NewString()[:8] + `","build_number":1}}`)
	if r := s.do(t, http.MethodPost, "/hooks/registry", bytes.NewReader(body), stdHeaders(t, uuid.NewString(), body, "application/cloudevents+json")); r.status != http.StatusAccepted {
		t.Errorf("registry delivery: %d %s, want 202 (a budget of its own)", r.status, r.body)
	}
	// A name that is no source is 404 every time, never 429, and its
	// detail is cut: made-up names take no budget of the limiter's table.
	name := "nope-" + strings.Repeat("x", 300)
	for i := range 4 {
		r := s.do(t, http.MethodPost, "/hooks/"+name, bytes.NewReader(body), stdHeaders(t, uuid.NewString(), body, "application/json"))
		p := evWantProblem(t, r, http.StatusNotFound, "not-found")
		if r.header.Get("RateLimit-Limit") != "" || len(p["detail"].(string)) > 100 {
			t.Errorf("unknown source, delivery %d: RateLimit-Limit %q, detail %q; want no rate limit and a short detail", i, r.header.Get("RateLimit-Limit"), p["detail"])
		}
	}
}
