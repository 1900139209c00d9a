package api_test

import (
	"bytes"
	"fmt"
	"net/http"
	"testing"

	"github.com/google/uuid"

	"github.com/converge-run/converge"
)

// TestHookEventsRejected: converge_events_rejected_total counts the
// rejections of POST /hooks/{source} as it counts those of POST
// /v1/events (SPEC §14): a kind rule's stale-version and version-conflict
// outcomes under its kind (a replayed delivery not again, a replayed
// version not at all), a workflow rule's under unknown; a 422
// mapping-failed under the failing rule's kind (unknown for a workflow
// rule); a refusal before any rule (bad signature, media type) under
// unknown. mapping-failed, bad-signature and unavailable are exported at
// zero from start-up.
func TestHookEventsRejected(t *testing.T) {
	t.Parallel()
	defs := []converge.SourceDef{{Name: "plain", Type: converge.SourceWebhook, Secret: hookStdSecret, Rules: []converge.SourceRule{
		{When: `body.t == "k"`, Kind: "build", Resource: `body.r`, Version: `int(body.v)`, Payload: `{"p": body.p}`},
		{When: `body.t == "w"`, Workflow: "release", Resource: `body.r`, Version: `int(body.v)`},
		{When: `body.t == "bad"`, Kind: "deploy", Resource: `body.nope`, Version: "1"},
		{When: `body.t == "badw"`, Workflow: "release", Resource: `body.nope`, Version: "1"},
	}}}
	s := hookStackWith(t, 0, defs)

	page := s.get(t, "/metrics")
	for _, series := range []string{
		`converge_events_rejected_total{kind="build",reason="mapping-failed"}`,
		`converge_events_rejected_total{kind="unknown",reason="mapping-failed"}`,
		`converge_events_rejected_total{kind="deploy",reason="bad-signature"}`,
		`converge_events_rejected_total{kind="deploy",reason="unavailable"}`,
		`converge_events_rejected_total{kind="build",reason="stale-version"}`,
	} {
		if got := metricValue(page.body, series); got != "0" {
			t.Errorf("at start-up %s = %q, want 0", series, got)
		}
	}

	post := func(id string, body string, wantStatus int) *evResponse {
		t.Helper()
		b := []byte(body)
		r := s.do(t, http.MethodPost, "/hooks/plain", bytes.NewReader(b), stdHeaders(t, id, b, "application/json"))
		evWantStatus(t, r, wantStatus)
		return r
	}
	outcome := func(r *evResponse) string {
		t.Helper()
		acc, _ := r.json(t)["accepted"].([]any)
		if len(acc) != 1 {
			t.Fatalf("accepted = %s", r.body)
		}
		return acc[0].(map[string]any)["outcome"].(string)
	}
	res, wres := hookRepo(), hookRepo()
	kind := func(v int, p string) string {
		return fmt.Sprintf(`{"t": "k", "r": %q, "v": %d, "p": %q}`, res, v, p)
	}
	post(uuid.NewString(), kind(5, "a"), http.StatusAccepted)
	stale := uuid.NewString()
	for _, c := range []struct {
		id, body, outcome string
	}{
		{stale, kind(3, "a"), "stale-version"},
		{uuid.NewString(), kind(5, "b"), "version-conflict"},
		{uuid.NewString(), kind(5, "a"), "replay"},
		{uuid.NewString(), fmt.Sprintf(`{"t": "w", "r": %q, "v": 5}`, wres), "accepted"},
		{uuid.NewString(), fmt.Sprintf(`{"t": "w", "r": %q, "v": 2}`, wres), "stale-version"},
	} {
		if got := outcome(post(c.id, c.body, http.StatusAccepted)); got != c.outcome {
			t.Errorf("%s: outcome %s, want %s", c.body, got, c.outcome)
		}
	}
	post(stale, kind(3, "a"), http.StatusOK) // the first answer again, not counted again
	evWantProblem(t, post(uuid.NewString(), `{"t": "bad"}`, http.StatusUnprocessableEntity), http.StatusUnprocessableEntity, "mapping-failed")
	evWantProblem(t, post(uuid.NewString(), `{"t": "badw"}`, http.StatusUnprocessableEntity), http.StatusUnprocessableEntity, "mapping-failed")
	forged := []byte(`{"t": "k"}`)
	h := stdHeaders(t, uuid.NewString(), []byte(`{}`), "application/json")
	evWantProblem(t, s.do(t, http.MethodPost, "/hooks/plain", bytes.NewReader(forged), h), http.StatusUnauthorized, "bad-signature")
	evWantProblem(t, s.do(t, http.MethodPost, "/hooks/plain", bytes.NewReader(forged), stdHeaders(t, uuid.NewString(), forged, "text/plain")),
		http.StatusUnsupportedMediaType, "unsupported-media-type")

	page = s.get(t, "/metrics")
	for _, c := range []struct{ kind, reason, want string }{
		{"build", "stale-version", "1"},
		{"build", "version-conflict", "1"},
		{"unknown", "stale-version", "1"},
		{"deploy", "mapping-failed", "1"},
		{"unknown", "mapping-failed", "1"},
		{"unknown", "bad-signature", "1"},
		{"unknown", "unsupported-media-type", "1"},
		{"build", "mapping-failed", "0"},
		{"deploy", "stale-version", "0"},
	} {
		series := `converge_events_rejected_total{kind="` + c.kind + `",reason="` + c.reason + `"}`
		if got := metricValue(page.body, series); got != c.want {
			t.Errorf("%s = %q, want %s", series, got, c.want)
		}
	}
}
