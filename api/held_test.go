package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/store"
)

func TestRunApproveReject(t *testing.T) {
	t.Parallel()
	s := evNewStack(t, "")
	held := func() *converge.Run {
		t.Helper()
		res, err := s.store.EventAccept(t.Context(), store.EventAcceptParams{
			EventSubmission: converge.EventSubmission{Kind: "deploy", Resource: "prod/" + uuid.NewString(), Version: 1, Payload: json.RawMessage(`{}`)},
			MaxAttempts:     3, Hold: []string{converge.HoldApproval},
		})
		if err != nil {
			t.Fatal(err)
		}
		return res.Run
	}
	post := func(path, body string) *evResponse {
		return s.do(t, http.MethodPost, path, strings.NewReader(body), map[string]string{"Content-Type": "application/json"})
	}

	run := held()
	ev := s.get(t, "/v1/events/"+run.EventID.String())
	evWantStatus(t, ev, http.StatusOK)
	if got := ev.json(t)["status"]; got != "held" {
		t.Errorf("event status = %v, want held", got)
	}
	r := post("/v1/runs/"+run.ID.String()+"/approve", `{"reason":"ship it"}`)
	evWantStatus(t, r, http.StatusOK)
	m := r.json(t)
	if m["status"] != "queued" || len(m["hold"].([]any)) != 0 {
		t.Errorf("approved: %s", r.body)
	}
	evWantProblem(t, post("/v1/runs/"+run.ID.String()+"/approve", ``), http.StatusConflict, "not-held")
	evWantProblem(t, post("/v1/runs/"+run.ID.String()+"/reject", ``), http.StatusConflict, "not-held")
	evWantProblem(t, post("/v1/runs/"+uuid.NewString()+"/approve", ``), http.StatusNotFound, "not-found")

	run = held()
	r = post("/v1/runs/"+run.ID.String()+"/reject", `{"reason":"no"}`)
	evWantStatus(t, r, http.StatusOK)
	if m := r.json(t); m["status"] != "cancelled" {
		t.Errorf("rejected: %s", r.body)
	}
	var n int
	if err := s.pool.QueryRow(t.Context(), `SELECT count(*) FROM converge_audit WHERE action = 'run.reject' AND targets ? $1 AND reason = 'no'`,
		run.ID.String()).Scan(&n); err != nil || n != 1 {
		t.Errorf("run.reject audit entries: %d, %v", n, err)
	}

	// The audit list by target: the rejected run's one entry, through
	// GET /v1/audit?target=; an over-long target is a 422, an empty one no
	// filter.
	a := s.get(t, "/v1/audit?target="+run.ID.String())
	evWantStatus(t, a, http.StatusOK)
	var page struct {
		Items []struct {
			Action, Reason string
			Targets        []string
		} `json:"items"`
	}
	if err := json.Unmarshal(a.body, &page); err != nil {
		t.Fatal(err)
	}
	if len(page.Items) != 1 || page.Items[0].Action != "run.reject" || page.Items[0].Reason != "no" ||
		len(page.Items[0].Targets) != 1 || page.Items[0].Targets[0] != run.ID.String() {
		t.Errorf("audit of the rejected run: %s", a.body)
	}
	if all := s.get(t, "/v1/audit"); !strings.Contains(string(all.body), `"run.approve"`) {
		t.Errorf("audit without a target lacks the approval: %s", all.body)
	}
	if all := s.get(t, "/v1/audit?target="); !strings.Contains(string(all.body), `"run.approve"`) {
		t.Errorf("audit with an empty target lacks the approval: %s", all.body)
	}
	evWantProblem(t, s.get(t, "/v1/audit?target="+strings.Repeat("a", 265)), http.StatusUnprocessableEntity, "invalid-request")
	// Characters, as the document's maxLength counts them, not bytes.
	evWantStatus(t, s.get(t, "/v1/audit?target="+url.QueryEscape(strings.Repeat("é", 264))), http.StatusOK)
	evWantProblem(t, s.get(t, "/v1/audit?target="+url.QueryEscape(strings.Repeat("é", 265))), http.StatusUnprocessableEntity, "invalid-request")
}

func TestQuarantineListRelease(t *testing.T) {
	t.Parallel()
	s := evNewStack(t, "")
	resource := "app/" + uuid.NewString()
	evWantStatus(t, s.post(t, evBody("build", resource, 1, `{}`)), http.StatusAccepted)
	quarantine(t.Context(), t, s, resource)

	// A new event of the quarantined stream is accepted held.
	r := s.post(t, evBody("build", resource, 2, `{}`))
	evWantStatus(t, r, http.StatusAccepted)
	var res struct {
		Run *converge.Run `json:"run"`
	}
	if err := json.Unmarshal(r.body, &res); err != nil {
		t.Fatal(err)
	}
	if res.Run.Status != converge.RunHeld || len(res.Run.Hold) != 1 || res.Run.Hold[0] != "quarantine" {
		t.Fatalf("run of a quarantined stream: %s", r.body)
	}
	rs := s.get(t, "/v1/resources/build/"+resource)
	evWantStatus(t, rs, http.StatusOK)
	if m := rs.json(t); m["quarantined"] != true || m["quarantined_at"] == nil {
		t.Errorf("resource: %s", rs.body)
	}

	l := s.get(t, "/v1/quarantine")
	evWantStatus(t, l, http.StatusOK)
	var page struct {
		Items []converge.Quarantine `json:"items"`
	}
	if err := json.Unmarshal(l.body, &page); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, q := range page.Items {
		if q.Kind == "build" && q.Resource == resource {
			found = q.HeldRunID != nil && *q.HeldRunID == res.Run.ID && q.FailedRuns == 3
		}
	}
	if !found {
		t.Errorf("quarantine list: %s", l.body)
	}

	path := "/v1/quarantine/build/" + resource + "/release"
	rel := s.do(t, http.MethodPost, path, nil, nil)
	evWantStatus(t, rel, http.StatusOK)
	var out struct {
		Kind, Resource string
		Run            *converge.Run
	}
	if err := json.Unmarshal(rel.body, &out); err != nil {
		t.Fatal(err)
	}
	if out.Kind != "build" || out.Resource != resource || out.Run == nil || out.Run.ID != res.Run.ID || out.Run.Status != converge.RunQueued {
		t.Errorf("release: %s", rel.body)
	}
	if p := evWantProblem(t, s.do(t, http.MethodPost, path, nil, nil), http.StatusConflict, "not-quarantined"); !strings.Contains(p["detail"].(string), "build/"+resource) {
		t.Errorf("not-quarantined detail %q does not name the stream", p["detail"])
	}
	// Not a release: a 404 that says what a release looks like, not that
	// the (quarantined) stream does not exist.
	if p := evWantProblem(t, s.do(t, http.MethodPost, "/v1/quarantine/build/"+resource, nil, nil), http.StatusNotFound, "not-found"); !strings.Contains(p["detail"].(string), "/release") {
		t.Errorf("404 detail %q, want the release's route", p["detail"])
	}
	// A stream that does not exist is not quarantined either (SPEC §11):
	// 409, of a configured kind or not, naming the stream.
	for _, stream := range []string{"build/nope-" + uuid.NewString(), "nokind/q/" + uuid.NewString()} {
		p := evWantProblem(t, s.do(t, http.MethodPost, "/v1/quarantine/"+stream+"/release", nil, nil), http.StatusConflict, "not-quarantined")
		if !strings.Contains(p["detail"].(string), stream) {
			t.Errorf("release of %s: detail %q does not name the stream", stream, p["detail"])
		}
	}
}

// quarantine marks stream build/resource quarantined after three failures
// (what the failure trigger does; the store tests drive it through real
// failures).
func quarantine(ctx context.Context, t *testing.T, s *evStack, resource string) {
	t.Helper()
	if _, err := s.pool.Exec(ctx, `UPDATE converge_streams SET failed_streak = 3, quarantined_at = now()
		WHERE kind = 'build' AND resource = $1`, resource); err != nil {
		t.Fatal(err)
	}
}
