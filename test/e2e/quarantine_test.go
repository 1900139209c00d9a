package e2e

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/converge-run/converge/test/cvproc"
	"github.com/converge-run/converge/test/pgtest"
	"github.com/converge-run/converge/test/testkit"
)

// TestHookQuarantine posts GitHub deliveries to converge serve whose
// rules start runs of a kind with quarantine_after: 2 and a target that
// always fails permanently, one rule an event and one a workflow run:
// after two failed runs each stream is quarantined (SPEC §11), as it is
// through /v1/events, and a third delivery's run is accepted held.
func TestHookQuarantine(t *testing.T) {
	t.Parallel()
	pgtest.URL(t)
	cvproc.Build(t)
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "broken for good", http.StatusBadRequest)
	}))
	t.Cleanup(target.Close)
	db := pgtest.NewDatabase(t)
	cfg := testkit.ConfigFile(t, fmt.Sprintf(`listen: 127.0.0.1:0
%sshutdown_timeout: 5s
river: {fetch_poll_interval: 20ms}
kinds:
  flaky:
    target:
      http: {url: %s/flaky, timeout: 20s}
    max_attempts: 1
    quarantine_after: 2
workflows:
  wf:
    steps:
      only: {kind: flaky, resource: "wf/{resource}"}
sources:
  github:
    type: github
    secret_env: GITHUB_WEBHOOK_SECRET
    rules:
      - when: 'headers["x-github-event"] == "push"'
        kind: flaky
        resource: 'body.repository.full_name'
        version: auto
      - when: 'headers["x-github-event"] == "release"'
        workflow: wf
        resource: 'body.repository.full_name'
        version: auto
`, databaseYAML(db), target.URL))
	const secret = "e2e-github-secret"
	p := start(t, cvproc.Env("CONVERGE_ADMIN_TOKEN="+adminToken, "GITHUB_WEBHOOK_SECRET="+secret), "serve", "--config", cfg)
	base := p.URL(t, 30*time.Second)
	cvproc.WaitHTTP(t, base+"/readyz", 30*time.Second)
	c := client{base: base, token: adminToken}

	deliver := func(event string) {
		t.Helper()
		body := []byte(`{"ref":"refs/heads/main","repository":{"full_name":"acme/web"}}`)
		mac := hmac.New(sha256.New, []byte(secret))
		mac.Write(body)
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/hooks/github", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-GitHub-Event", event)
		req.Header.Set("X-GitHub-Delivery", uuid.NewString())
		req.Header.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac.Sum(nil)))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("post the %s delivery: %d", event, resp.StatusCode)
		}
	}
	// latestRun returns the status and hold of the newest run of stream
	// flaky/resource.
	latestRun := func(resource string) (status string, hold []any) {
		t.Helper()
		code, body := c.do(t, http.MethodGet, "/v1/events?kind=flaky&resource="+resource+"&limit=1", nil)
		items, _ := body["items"].([]any)
		if code != http.StatusOK || len(items) != 1 {
			t.Fatalf("events of flaky/%s: %d %v", resource, code, body)
		}
		_, ev := c.do(t, http.MethodGet, "/v1/events/"+items[0].(map[string]any)["id"].(string), nil)
		runs, _ := ev["runs"].([]any)
		if len(runs) == 0 {
			t.Fatalf("event without runs: %v", ev)
		}
		run := runs[len(runs)-1].(map[string]any)
		hold, _ = run["hold"].([]any)
		return fmt.Sprint(run["status"]), hold
	}
	waitFailed := func(resource string, version int) {
		t.Helper()
		testkit.Eventually(t, 30*time.Second, func() (bool, string) {
			_, r := c.do(t, http.MethodGet, "/v1/resources/flaky/"+resource, nil)
			status, _ := latestRun(resource)
			return r["latest_version"] == float64(version) && status == "failed",
				fmt.Sprintf("flaky/%s: latest version %v, run %s", resource, r["latest_version"], status)
		})
	}

	streams := map[string]string{"push": "acme/web", "release": "wf/acme/web"}
	for event, resource := range streams {
		for v := 1; v <= 2; v++ {
			deliver(event)
			waitFailed(resource, v)
		}
	}
	code, q := c.do(t, http.MethodGet, "/v1/quarantine", nil)
	if code != http.StatusOK {
		t.Fatalf("GET /v1/quarantine: %d %v", code, q)
	}
	listed := map[string]map[string]any{}
	items, _ := q["items"].([]any)
	for _, it := range items {
		it := it.(map[string]any)
		listed[fmt.Sprint(it["kind"], " ", it["resource"])] = it
	}
	for _, resource := range streams {
		it := listed["flaky "+resource]
		if it == nil {
			t.Errorf("stream flaky/%s not quarantined after two failed runs from /hooks: %v", resource, q)
			continue
		}
		if it["failed_runs"] != float64(2) {
			t.Errorf("flaky/%s quarantined with failed_runs %v, want 2", resource, it["failed_runs"])
		}
		if _, r := c.do(t, http.MethodGet, "/v1/resources/flaky/"+resource, nil); r["quarantined"] != true {
			t.Errorf("resource flaky/%s: quarantined %v", resource, r["quarantined"])
		}
	}
	// A third delivery's run of the quarantined stream is held.
	deliver("push")
	testkit.Eventually(t, 10*time.Second, func() (bool, string) {
		status, hold := latestRun("acme/web")
		return status == "held" && fmt.Sprint(hold) == "[quarantine]", fmt.Sprintf("third run %s, hold %v", status, hold)
	})
}
