package api_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/converge-run/converge/test/pgtest"
)

// TestReadyzProblem: /readyz answers 200 while the database serves, and
// 503 as an unavailable problem (SPEC §4: every error is a problem body)
// whose detail is the real reason (§15), with the reason as a member of
// its own and Retry-After, once it does not.
func TestReadyzProblem(t *testing.T) {
	t.Parallel()
	s := evNewStack(t, pgtest.NewDatabase(t))
	r := s.get(t, "/readyz")
	evWantStatus(t, r, http.StatusOK)
	if got := r.json(t)["status"]; got != "ready" {
		t.Errorf("ready: status %v", got)
	}
	s.pool.Close()
	r = s.get(t, "/readyz")
	p := evWantProblem(t, r, http.StatusServiceUnavailable, "unavailable")
	if p["detail"] != "database unreachable" || p["reason"] != "database unreachable" || p["title"] != "Service unavailable" {
		t.Errorf("not ready: %s, want detail and reason database unreachable", r.body)
	}
	if r.header.Get("Retry-After") == "" || r.header.Get("X-Request-Id") == "" || p["request_id"] != r.header.Get("X-Request-Id") {
		t.Errorf("not ready: Retry-After %q, X-Request-Id %q, body %s", r.header.Get("Retry-After"), r.header.Get("X-Request-Id"), r.body)
	}
	var m map[string]json.RawMessage
	_ = json.Unmarshal(r.body, &m)
	for k := range m {
		switch k {
		case "type", "title", "status", "detail", "request_id", "reason":
		default:
			t.Errorf("not ready: unexpected member %q in %s", k, r.body)
		}
	}
	head := s.do(t, http.MethodHead, "/readyz", nil, nil)
	if head.status != http.StatusServiceUnavailable || len(head.body) != 0 {
		t.Errorf("HEAD not ready: %d with %d bytes", head.status, len(head.body))
	}
}
