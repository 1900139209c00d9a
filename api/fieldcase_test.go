package api_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/converge-run/converge/test/pgtest"
)

// TestFieldNamesExact: a key that names a field only in another case
// ("Kind", "RESOURCE", the Kelvin sign for k) is an unknown field (SPEC §4),
// 422 naming the key as sent, on every endpoint with a body, and changes
// nothing; the payload's keys are the user's and free.
func TestFieldNamesExact(t *testing.T) {
	t.Parallel()
	// A database of its own: the row counts below would see the package's
	// other tests, which run in parallel on the shared one.
	s := evNewStack(t, pgtest.NewDatabase(t))
	before := evRowCounts(t, s.pool)
	for _, x := range []struct{ path, body, field string }{
		{"/v1/events", `{"Kind":"build","resource":"case","version":1}`, "Kind"},
		{"/v1/events", `{"kind":"build","RESOURCE":"case","version":1}`, "RESOURCE"},
		{"/v1/events", `{"kind":"build","resource":"case","version":1,"Payload":{}}`, "Payload"},
		{"/v1/events", "{\"\u212aind\":\"build\",\"resource\":\"case\",\"version\":1}", "\u212aind"},
		{"/v1/workflow-runs", `{"Workflow":"release","resource":"case","version":1}`, "Workflow"},
		{"/v1/dead-letters/redrive", `{"IDs":["01a24268-a25a-7895-b0db-fc5edf076d27"]}`, "IDs"},
		{"/v1/dead-letters/discard", `{"filter":{"kind":"build"},"Reason":"x"}`, "Reason"},
		{"/v1/dead-letters/purge", `{"Dry_Run":true}`, "Dry_Run"},
		{"/v1/dead-letters/01a24268-a25a-7895-b0db-fc5edf076d27/discard", `{"reasoN":"x"}`, "reasoN"},
		{"/v1/runs/01a24268-a25a-7895-b0db-fc5edf076d27/cancel", `{"Reason":"x"}`, "Reason"},
		{"/v1/quarantine/build/case/release", `{"Reason":"x"}`, "Reason"},
	} {
		r := s.do(t, http.MethodPost, x.path, strings.NewReader(x.body), map[string]string{"Content-Type": "application/json"})
		p := evWantProblem(t, r, http.StatusUnprocessableEntity, "invalid-request")
		if f := evFields(t, p); !slices.Equal(f, []string{x.field}) {
			t.Errorf("POST %s %s: fields %v, want [%s]", x.path, x.body, f, x.field)
		}
	}
	if after := evRowCounts(t, s.pool); after != before {
		t.Errorf("refused bodies changed rows: %v, then %v", before, after)
	}
	// A payload's keys in any case are the user's.
	evWantStatus(t, s.post(t, evBody("build", "case", 1, `{"Kind":"x","RESOURCE":{"Version":1}}`)), http.StatusAccepted)
	// Malformed JSON after a bad key is still malformed.
	r := s.do(t, http.MethodPost, "/v1/events", strings.NewReader(`{"Kind":"build",`), map[string]string{"Content-Type": "application/json"})
	evWantProblem(t, r, http.StatusBadRequest, "malformed-json")
}

// TestFieldCaseTrailingData: the case check reads only the first JSON
// value, so a second value after a valid object is 400 malformed-json
// ("unexpected data after the JSON object") whatever keys it holds, and a
// wrong-case key in the first value is still 422 when data follows it.
func TestFieldCaseTrailingData(t *testing.T) {
	t.Parallel()
	// A database of its own: the row counts below would see the package's
	// other tests, which run in parallel on the shared one.
	s := evNewStack(t, pgtest.NewDatabase(t))
	before := evRowCounts(t, s.pool)
	for _, x := range []struct {
		path, body string
		status     int
		slug       string
	}{
		{"/v1/events", `{"kind":"build","resource":"trail","version":1}{"Kind":1}`, http.StatusBadRequest, "malformed-json"},
		{"/v1/events", `{"kind":"build","resource":"trail","version":1} ["Kind", {"RESOURCE":1}]`, http.StatusBadRequest, "malformed-json"},
		{"/v1/workflow-runs", `{"workflow":"release","resource":"trail","version":1}{"Workflow":1}`, http.StatusBadRequest, "malformed-json"},
		{"/v1/runs/01a24268-a25a-7895-b0db-fc5edf076d27/cancel", `{"reason":"x"}{"Reason":"y"}`, http.StatusBadRequest, "malformed-json"},
		{"/v1/events", `{"Kind":"build","resource":"trail","version":1}{"kind":"build"}`, http.StatusUnprocessableEntity, "invalid-request"},
	} {
		r := s.do(t, http.MethodPost, x.path, strings.NewReader(x.body), map[string]string{"Content-Type": "application/json"})
		p := evWantProblem(t, r, x.status, x.slug)
		if d, _ := p["detail"].(string); x.status == http.StatusBadRequest && !strings.Contains(d, "unexpected data after the JSON object") {
			t.Errorf("POST %s %s: detail %q, want the trailing data named", x.path, x.body, d)
		}
		if f := evFields(t, p); x.status == http.StatusUnprocessableEntity && !slices.Equal(f, []string{"Kind"}) {
			t.Errorf("POST %s %s: fields %v, want [Kind]", x.path, x.body, f)
		}
	}
	if after := evRowCounts(t, s.pool); after != before {
		t.Errorf("refused bodies changed rows: %v, then %v", before, after)
	}
}
