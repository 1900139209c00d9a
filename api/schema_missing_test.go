package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/converge-run/converge/test/pgtest"
)

// TestSchemaMissingUnavailable: on a database that was never migrated a
// read of the API is 503 unavailable with Retry-After, saying the schema is
// not current, not 500 internal (SPEC §15: 500 is for bugs only).
func TestSchemaMissingUnavailable(t *testing.T) {
	t.Parallel()
	s := evNewStack(t, pgtest.EmptyDatabase(t))
	for _, path := range []string{"/v1/events", "/v1/resources/build/app/web", "/v1/dead-letters", "/v1/audit"} {
		r := s.get(t, path)
		p := evWantProblem(t, r, http.StatusServiceUnavailable, "unavailable")
		if r.header.Get("Retry-After") == "" {
			t.Errorf("GET %s: no Retry-After", path)
		}
		if d, _ := p["detail"].(string); !strings.HasPrefix(d, "schema not current") {
			t.Errorf("GET %s: detail %q", path, d)
		}
	}
	r := s.post(t, evBody("build", "app/web", 1, ""))
	evWantProblem(t, r, http.StatusServiceUnavailable, "unavailable")
	if r.header.Get("Retry-After") == "" {
		t.Error("POST /v1/events: no Retry-After")
	}
}
