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
	json := http.Header{"Content-Type": {"application/json"}}
	problem := http.Header{"Content-Type": {"application/problem+json"}}
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
