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

// TestSchemaCurrentMissingColumnInternal: on a database whose migrations
// are all applied, a statement that names a column the table lacks (a bug
// of the query, here a column dropped behind converge's back) is 500
// internal without Retry-After, not a 503 a client would retry forever;
// a read (GET /v1/audit) and a transaction (POST /v1/events, which writes
// its event's columns) alike.
func TestSchemaCurrentMissingColumnInternal(t *testing.T) {
	t.Parallel()
	s := evNewStack(t, pgtest.NewDatabase(t))
	for _, sql := range []string{`ALTER TABLE converge_audit DROP COLUMN request_id`, `ALTER TABLE converge_events DROP COLUMN payload`} {
		if _, err := s.pool.Exec(t.Context(), sql); err != nil {
			t.Fatal(err)
		}
	}
	for name, r := range map[string]*evResponse{
		"GET /v1/audit":   s.get(t, "/v1/audit"),
		"POST /v1/events": s.post(t, evBody("build", "app/web", 1, "")),
	} {
		p := evWantProblem(t, r, http.StatusInternalServerError, "internal")
		if ra := r.header.Get("Retry-After"); ra != "" {
			t.Errorf("%s: Retry-After %q on a 500", name, ra)
		}
		if d, _ := p["detail"].(string); d != "internal error" {
			t.Errorf("%s: detail %q, want \"internal error\"", name, d)
		}
	}
}
