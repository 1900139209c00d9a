package apicheck_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/converge-run/converge/test/cvproc"
	"github.com/converge-run/converge/test/pgtest"
)

// TestValidatorCatchesDrift shows that the validator of
// TestEveryAnswerMatchesTheDocument can fail: answers and requests that
// break the served document are each reported.
func TestValidatorCatchesDrift(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewDatabase(t)
	srv := cvproc.Start(t, cvproc.Options{Args: []string{"api"}, Env: cvproc.Env("DATABASE_URL="+dbURL,
		"CONVERGE_LISTEN=127.0.0.1:0", "CONVERGE_ADMIN_TOKEN="+adminToken)})
	base := srv.URL(t, time.Minute)
	v := newValidator(t, base)
	req := func(method, path string) *http.Request {
		r, err := http.NewRequestWithContext(t.Context(), method, base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		r.Header.Set("Authorization", "Bearer "+adminToken)
		return r
	}
	json := http.Header{"Content-Type": {"application/json"}, "X-Request-Id": {"drift-1"}}
	problem := http.Header{"Content-Type": {"application/problem+json"}, "X-Request-Id": {"drift-2"}}
	cancel := req("POST", "/v1/runs/0190a0b0-0000-7000-8000-000000000000/cancel")
	post := req("POST", "/v1/events")
	post.Header.Set("Content-Type", "application/json")
	cases := []struct {
		name    string
		req     *http.Request
		reqBody string
		status  int
		header  http.Header
		body    string
		want    string
	}{
		{"a status the operation does not document", req("GET", "/v1/events"), "", http.StatusTeapot, problem,
			`{"type":"urn:converge:problem:internal","title":"x","status":418}`, "status is not supported"},
		{"a field of the wrong type", req("GET", "/v1/events/0190a0b0-0000-7000-8000-000000000000"), "", 200, json,
			`{"id":5}`, "doesn't match schema"},
		{"a problem sent as plain JSON", req("GET", "/v1/events/0190a0b0-0000-7000-8000-000000000000"), "", 404, json,
			`{"type":"urn:converge:problem:not-found","title":"Not found","status":404}`, "response"},
		{"a request the document refuses, answered 202", post, `{"kind":"build","resource":"a","version":1,"surplus":true}`, 202, json,
			`{"event":{},"run":{},"superseded_runs":[]}`, ""},
		{"a path outside the document", req("GET", "/v1/nowhere"), "", 404, problem, `{}`, "not in the document"},
		{"an open attempt's outcome as an empty string", cancel, "", 200, json, openRun(`""`), "outcome"},
		{"an answer without X-Request-Id", cancel, "", 200, http.Header{"Content-Type": {"application/json"}}, openRun("null"), "X-Request-Id"},
	}
	// The same run with the open attempt's outcome null passes.
	if err := v.check(cancel, nil, 200, json, []byte(openRun("null"))); err != nil {
		t.Errorf("a running run whose open attempt's outcome is null: %v", err)
	}
	for _, c := range cases {
		err := v.check(c.req, []byte(c.reqBody), c.status, c.header, []byte(c.body))
		if err == nil {
			t.Errorf("%s: the validator found nothing", c.name)
			continue
		}
		if c.want != "" && !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want it to say %q", c.name, err, c.want)
		}
	}
}

// openRun is a running run whose one attempt is in flight, its outcome
// outcome (JSON).
func openRun(outcome string) string {
	return `{"id":"0190a0b0-0000-7000-8000-000000000000","event_id":"0190a0b0-0000-7000-8000-000000000001","number":1,` +
		`"status":"running","hold":[],"attempts":1,"max_attempts":3,"next_attempt_at":null,"created_at":"2026-01-01T00:00:00Z",` +
		`"started_at":"2026-01-01T00:00:01Z","finished_at":null,"error":null,"output":null,"trace_id":null,` +
		`"attempt_history":[{"number":1,"outcome":` + outcome + `,"started_at":"2026-01-01T00:00:01Z","finished_at":null,"duration_ms":null,"error":null}]}`
}
