package api_test

import (
	"net/http"
	"slices"
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
		for _, body := range []string{`[]`, `1`, `"x"`, `true`, `[{"reason":"x"}]`, `null`, ` null `} {
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

// TestBodyNullField: a null where an action body takes a value (a reason,
// dry_run, ids, a bulk filter or one of its fields, older_than) is 422
// invalid-request naming the field, as the document types none of them
// nullable (SPEC §4: schemas as strict as the server); before, null was
// taken as the field left out, and {"filter":{},"dry_run":null} redrove
// every open dead letter.
func TestBodyNullField(t *testing.T) {
	t.Parallel()
	s := evNewStack(t, "")
	id := uuid.Must(uuid.NewV7()).String()
	cases := []struct {
		path, body, field string
	}{
		{"/v1/dead-letters/" + id + "/redrive", `{"reason":null}`, "reason"},
		{"/v1/dead-letters/" + id + "/discard", `{"reason":null}`, "reason"},
		{"/v1/runs/" + id + "/cancel", `{"reason":null}`, "reason"},
		{"/v1/runs/" + id + "/approve", `{"reason":null}`, "reason"},
		{"/v1/workflow-runs/" + id + "/cancel", `{"reason":null}`, "reason"},
		{"/v1/quarantine/build/app/web/release", `{"reason":null}`, "reason"},
		{"/v1/dead-letters/redrive", `{"filter":{},"dry_run":null}`, "dry_run"},
		{"/v1/dead-letters/discard", `{"ids":["` + id + `"],"filter":null}`, "filter"},
		{"/v1/dead-letters/redrive", `{"ids":["` + id + `"],"reason":null}`, "reason"},
		{"/v1/dead-letters/discard", `{"filter":{"status":null},"dry_run":true}`, "filter.status"},
		{"/v1/dead-letters/purge", `{"older_than":null,"dry_run":true}`, "older_than"},
		{"/v1/dead-letters/purge", `{"dry_run":null}`, "dry_run"},
	}
	for _, c := range cases {
		r := s.do(t, http.MethodPost, c.path, strings.NewReader(c.body), map[string]string{"Content-Type": "application/json"})
		if r.status != http.StatusUnprocessableEntity {
			t.Errorf("POST %s %s: %d %s, want 422", c.path, c.body, r.status, r.body)
			continue
		}
		p := evWantProblem(t, r, http.StatusUnprocessableEntity, "invalid-request")
		if fields := evFields(t, p); !slices.Contains(fields, c.field) {
			t.Errorf("POST %s %s: errors %v, want %q named", c.path, c.body, fields, c.field)
		}
	}
	// Leaving the fields out is fine.
	r := s.do(t, http.MethodPost, "/v1/dead-letters/purge", strings.NewReader(`{"dry_run":true}`), map[string]string{"Content-Type": "application/json"})
	evWantStatus(t, r, http.StatusOK)
}

// TestBodyTooDeep: a body that is valid JSON but nests deeper than
// encoding/json goes (10000 levels) is 422 invalid-request naming the
// field nested too deep ("body" when the body is not an object), not 400
// malformed-json (SPEC §4, G9); TestPayloadLimits has the payload's.
func TestBodyTooDeep(t *testing.T) {
	t.Parallel()
	s := evNewStack(t, "")
	deep := strings.Repeat("[", 20000) + strings.Repeat("]", 20000)
	for _, c := range []struct{ path, body, field string }{
		{"/v1/dead-letters/purge", `{"reason":` + deep + `}`, "reason"},
		{"/v1/dead-letters/redrive", `{"dry_run":true, "ids" :` + deep + `}`, "ids"},
		{"/v1/dead-letters/discard", deep, "body"},
		{"/v1/dead-letters/purge", `{"dry_run":true,"a\\\"b":"[{","c\\\"":` + deep + `}`, `c\"`},
	} {
		r := s.do(t, http.MethodPost, c.path, strings.NewReader(c.body), map[string]string{"Content-Type": "application/json"})
		if r.status != http.StatusUnprocessableEntity {
			t.Errorf("POST %s (%s nested 20000 deep): %d %.200s, want 422", c.path, c.field, r.status, r.body)
			continue
		}
		p := evWantProblem(t, r, http.StatusUnprocessableEntity, "invalid-request")
		if fields := evFields(t, p); !slices.Equal(fields, []string{c.field}) {
			t.Errorf("POST %s: errors %v, want [%s]", c.path, fields, c.field)
		}
	}
}
