package api_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/store"
)

// TestHeldForBothAndCancelled: SPEC §11's holds one by one, through the
// API. A run held for approval on a quarantined stream is held for both:
// approve clears only the approval (still held, for quarantine; approving
// again, or rejecting, is 409 not-held), and the release queues it. A
// release of a quarantined stream with no held run answers "run": null,
// and GET /v1/quarantine names its fields as SPEC does. A cancel ends a
// held run cancelled, whatever holds it, and a reject does too.
func TestHeldForBothAndCancelled(t *testing.T) {
	t.Parallel()
	s := evNewStack(t, "")
	post := func(path, body string) *evResponse {
		return s.do(t, http.MethodPost, path, strings.NewReader(body), map[string]string{"Content-Type": "application/json"})
	}
	// A first event makes the stream, which is then quarantined; the
	// second is held for approval and quarantine.
	resource := "app/" + uuid.NewString()
	evWantStatus(t, s.post(t, evBody("build", resource, 1, `{}`)), http.StatusAccepted)
	quarantine(t.Context(), t, s, resource)
	accept := func(v int64, hold ...string) *converge.Run {
		t.Helper()
		res, err := s.store.EventAccept(t.Context(), store.EventAcceptParams{
			EventSubmission: converge.EventSubmission{Kind: "build", Resource: resource, Version: v, Payload: json.RawMessage(`{}`)},
			MaxAttempts:     3, Hold: hold,
		})
		if err != nil {
			t.Fatal(err)
		}
		return res.Run
	}
	run := accept(2, converge.HoldApproval)
	if run.Status != converge.RunHeld || !slices.Equal(run.Hold, []string{converge.HoldApproval, converge.HoldQuarantine}) {
		t.Fatalf("a run for approval on a quarantined stream: %s %v, want held for approval and quarantine", run.Status, run.Hold)
	}
	r := post("/v1/runs/"+run.ID.String()+"/approve", `{"reason":"looks fine"}`)
	evWantStatus(t, r, http.StatusOK)
	if m := r.json(t); m["status"] != "held" || !slices.Equal(anyStrings(m["hold"]), []string{"quarantine"}) {
		t.Errorf("approved while quarantined: %s, want held for quarantine", r.body)
	}
	evWantProblem(t, post("/v1/runs/"+run.ID.String()+"/approve", ``), http.StatusConflict, "not-held")
	evWantProblem(t, post("/v1/runs/"+run.ID.String()+"/reject", ``), http.StatusConflict, "not-held")

	l := s.get(t, "/v1/quarantine")
	evWantStatus(t, l, http.StatusOK)
	var page struct {
		Items []map[string]any `json:"items"`
	}
	if err := json.Unmarshal(l.body, &page); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, q := range page.Items {
		if q["resource"] != resource {
			continue
		}
		found = true
		keys := make([]string, 0, len(q))
		for k := range q {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		if !slices.Equal(keys, []string{"failed_runs", "held_run_id", "kind", "resource", "since"}) ||
			q["kind"] != "build" || q["held_run_id"] != run.ID.String() || q["failed_runs"] != float64(3) || q["since"] == nil {
			t.Errorf("quarantine item: %v", q)
		}
	}
	if !found {
		t.Fatalf("the quarantined stream is not listed: %s", l.body)
	}

	rel := post("/v1/quarantine/build/"+resource+"/release", ``)
	evWantStatus(t, rel, http.StatusOK)
	if m := rel.json(t); m["run"] == nil || m["run"].(map[string]any)["status"] != "queued" {
		t.Errorf("release: %s, want the run queued", rel.body)
	}

	// Quarantined again with no held run: the release's run is null.
	quarantine(t.Context(), t, s, resource)
	rel = post("/v1/quarantine/build/"+resource+"/release", ``)
	evWantStatus(t, rel, http.StatusOK)
	if m := rel.json(t); m["kind"] != "build" || m["resource"] != resource || m["run"] != nil || !strings.Contains(string(rel.body), `"run":null`) {
		t.Errorf("release with nothing held: %s, want run null", rel.body)
	}

	// A cancel ends a held run cancelled, whatever holds it; so does a
	// reject.
	for i, how := range []string{"cancel", "reject"} {
		held := accept(int64(10+i), converge.HoldApproval)
		r := post("/v1/runs/"+held.ID.String()+"/"+how, `{"reason":"not this one"}`)
		evWantStatus(t, r, http.StatusOK)
		if m := r.json(t); m["status"] != "cancelled" || m["finished_at"] == nil {
			t.Errorf("%s of a held run: %s, want cancelled", how, r.body)
		}
		evWantProblem(t, post("/v1/runs/"+held.ID.String()+"/approve", ``), http.StatusConflict, "not-held")
	}
}

// anyStrings is a JSON array of strings as []string.
func anyStrings(v any) []string {
	list, _ := v.([]any)
	out := make([]string, 0, len(list))
	for _, x := range list {
		s, _ := x.(string)
		out = append(out, s)
	}
	return out
}
