package api_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/converge-run/converge/test/pgtest"
)

// TestTextNotUTF8: a text field that is not valid UTF-8 (a raw invalid
// byte, or a lone UTF-16 surrogate escape) or holds U+0000 is 422
// invalid-request naming the field, in every body and query that takes
// text (SPEC §4 "Limits on input"), and changes nothing. Go's decoder would
// otherwise replace the bad bytes with U+FFFD and accept them.
func TestTextNotUTF8(t *testing.T) {
	t.Parallel()
	// A database of its own: the test counts every row.
	s := evNewStack(t, pgtest.NewDatabase(t))
	id := uuid.Must(uuid.NewV7()).String()
	actions := []string{
		"/v1/dead-letters/" + id + "/redrive",
		"/v1/dead-letters/" + id + "/discard",
		"/v1/runs/" + id + "/cancel",
		"/v1/runs/" + id + "/approve",
		"/v1/runs/" + id + "/reject",
		"/v1/workflow-runs/" + id + "/cancel",
		"/v1/quarantine/build/app/web/release",
		"/v1/dead-letters/purge",
	}
	type tc struct {
		path, body, field string
	}
	var cases []tc
	for _, bad := range []string{"bad\xff", "\xc3", `\ud800`, `x\udc00y`, `a\u0000`} {
		for _, p := range actions {
			cases = append(cases, tc{p, `{"reason":"` + bad + `"}`, "reason"})
		}
		cases = append(cases,
			tc{"/v1/dead-letters/redrive", `{"ids":["` + id + `"],"reason":"` + bad + `"}`, "reason"},
			tc{"/v1/dead-letters/discard", `{"filter":{"q":"` + bad + `"}}`, "filter.q"},
			tc{"/v1/dead-letters/discard", `{"filter":{"kind":"build","resource":"app` + bad + `"}}`, "filter.resource"},
			tc{"/v1/dead-letters/redrive", `{"ids":["` + id + `","` + bad + `"]}`, "ids[1]"},
			tc{"/v1/events", `{"kind":"build","resource":"app/` + bad + `","version":1}`, "resource"},
			tc{"/v1/events", `{"kind":"` + bad + `","resource":"app/web","version":1}`, "kind"},
			tc{"/v1/workflow-runs", `{"workflow":"release","resource":"app/` + bad + `","version":1}`, "resource"},
		)
	}
	// Raw invalid bytes in a payload, at any depth: the payload field.
	for _, body := range []string{
		`{"kind":"build","resource":"app/web","version":1,"payload":{"x":"bad` + "\xff" + `"}}`,
		`{"kind":"build","resource":"app/web","version":1,"payload":{"a":[{"b":"` + "\xe2\x82" + `"}]}}`,
		`{"kind":"build","resource":"app/web","version":1,"payload":{"k` + "\xff" + `":1}}`,
	} {
		cases = append(cases, tc{"/v1/events", body, "payload"},
			tc{"/v1/workflow-runs", strings.Replace(body, `"kind":"build"`, `"workflow":"release"`, 1), "payload"})
	}
	// A bad key is the body's (or its object's) problem.
	cases = append(cases, tc{"/v1/runs/" + id + "/cancel", `{"reas` + "\xff" + `on":"x"}`, "body"},
		tc{"/v1/dead-letters/discard", `{"filter":{"q` + "\xff" + `":"x"}}`, "filter"})

	before := evRowCounts(t, s.pool)
	for _, c := range cases {
		r := s.do(t, http.MethodPost, c.path, strings.NewReader(c.body), map[string]string{"Content-Type": "application/json"})
		if r.status != http.StatusUnprocessableEntity {
			t.Errorf("POST %s %q: %d %s, want 422", c.path, c.body, r.status, r.body)
			continue
		}
		p := evWantProblem(t, r, http.StatusUnprocessableEntity, "invalid-request")
		if fields := evFields(t, p); !slices.Contains(fields, c.field) {
			t.Errorf("POST %s %q: errors %v, want %q among them", c.path, c.body, fields, c.field)
		}
	}
	for _, q := range []string{"/v1/dead-letters?q=%FF", "/v1/dead-letters?resource=app%C3", "/v1/events?kind=%FF",
		"/v1/events?resource=a%00", "/v1/workflow-runs?workflow=%FF", "/v1/audit?cursor=%FF", "/v1/quarantine?kind=%FF",
		"/v1/deliveries?source=%FF"} {
		r := s.get(t, q)
		if r.status != http.StatusUnprocessableEntity {
			t.Errorf("GET %s: %d %s, want 422", q, r.status, r.body)
			continue
		}
		p := evWantProblem(t, r, http.StatusUnprocessableEntity, "invalid-request")
		if len(evFields(t, p)) == 0 {
			t.Errorf("GET %s: no errors entry: %s", q, r.body)
		}
	}
	if after := evRowCounts(t, s.pool); after != before {
		t.Errorf("rows %v, then %v: a refused request changed something", before, after)
	}
	var audit int
	if err := s.pool.QueryRow(t.Context(), `SELECT count(*) FROM converge_audit`).Scan(&audit); err != nil || audit != 0 {
		t.Errorf("audit entries %d (%v), want none", audit, err)
	}

	// Valid text (U+FFFD itself, a surrogate pair, other escapes) is as before.
	for _, body := range []string{`{"reason":"ok \ufffd \ud83d\ude00 é \u00e9 \"q\" \\ \n"}`, `{}`, ``} {
		r := s.do(t, http.MethodPost, "/v1/runs/"+id+"/cancel", strings.NewReader(body), map[string]string{"Content-Type": "application/json"})
		evWantProblem(t, r, http.StatusNotFound, "not-found")
	}
	r := s.post(t, `{"kind":"build","resource":"app/ok","version":1,"payload":{"s":"\ufffd é \ud83d\ude00","n":[1,{"m":"\u00e9"}]}}`)
	evWantStatus(t, r, http.StatusAccepted)
	if got := r.json(t)["event"].(map[string]any)["payload"].(map[string]any)["s"]; got != "\ufffd é \U0001F600" {
		t.Errorf("payload string %q", got)
	}
}
