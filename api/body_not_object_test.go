package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"
)

// TestBodyNotAnObject: a JSON body that is not an object is 422
// invalid-request with one errors entry, field "body" (SPEC §4:
// validation errors add errors), on every route that takes a body.
func TestBodyNotAnObject(t *testing.T) {
	t.Parallel()
	s := evNewStack(t, "")
	id := uuid.Must(uuid.NewV7()).String()
	for _, path := range []string{"/v1/events", "/v1/workflow-runs", "/v1/runs/" + id + "/cancel", "/v1/runs/" + id + "/approve",
		"/v1/dead-letters/" + id + "/redrive", "/v1/dead-letters/redrive", "/v1/dead-letters/discard", "/v1/dead-letters/purge",
		"/v1/workflow-runs/" + id + "/cancel", "/v1/quarantine/build/app/web/release"} {
		for _, body := range []string{`[]`, `1`, `"x"`, `true`, `[{"reason":"x"}]`} {
			r := s.do(t, http.MethodPost, path, strings.NewReader(body), map[string]string{"Content-Type": "application/json"})
			if r.status != http.StatusUnprocessableEntity {
				t.Errorf("POST %s %s: %d %s, want 422", path, body, r.status, r.body)
				continue
			}
			p := evWantProblem(t, r, http.StatusUnprocessableEntity, "invalid-request")
			if fields := evFields(t, p); len(fields) != 1 || fields[0] != "body" {
				t.Errorf("POST %s %s: errors %v, want one for body: %s", path, body, fields, r.body)
			}
		}
	}
}
