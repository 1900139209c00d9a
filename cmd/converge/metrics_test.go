package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/converge-run/converge/store"
	"github.com/converge-run/converge/test/pgtest"
	"github.com/converge-run/converge/test/testkit"
)

// TestMetricsCountStepsAndSupersessions runs `converge serve` (API and
// worker in one process, as deployed) and checks on /metrics that the
// work done inside the store's transactions is counted, exactly once:
// a workflow step accepted by its need's success in the worker's finish
// (converge_events_accepted_total{source="workflow"}), and the runs
// superseded by an API event, by a workflow run's start, by a step a
// finish accepts and by a hook's event (converge_runs_superseded_total).
func TestMetricsCountStepsAndSupersessions(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs workers")
	}
	// The target answers 200 at once, except for resources under block/,
	// whose calls last until converge stops them (a superseded run's
	// attempt is cancelled) or the test ends.
	release := make(chan struct{})
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Resource string `json:"resource"`
		}
		_ = json.NewDecoder(r.Body).Decode(&body)
		if strings.HasPrefix(body.Resource, "block/") {
			select {
			case <-r.Context().Done():
			case <-release:
			}
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
	t.Cleanup(target.Close)
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })

	const secret = "metrics-test-github-secret"
	cfg := testkit.ConfigFile(t, fmt.Sprintf(`shutdown_timeout: 1s
river: {fetch_poll_interval: 20ms}
kinds:
  build:
    target: {http: {url: %[1]q, timeout: 30s}}
    max_attempts: 1
  deploy:
    target: {http: {url: %[1]q, timeout: 30s}}
    max_attempts: 1
workflows:
  release:
    steps:
      build:  {kind: build}
      deploy: {kind: deploy, needs: [build]}
  promote:
    steps:
      build:  {kind: build, resource: "ok/{resource}"}
      deploy: {kind: deploy, resource: "block/{resource}", needs: [build]}
sources:
  gh:
    type: github
    secret_env: METRICS_GH_SECRET
    rules:
      - when: 'headers["x-github-event"] == "push"'
        kind: deploy
        resource: 'body.repository'
        version: auto
`, target.URL))
	admin := store.NewTokenSecret()
	p := secStart(t, map[string]string{"DATABASE_URL": pgtest.NewDatabase(t), "CONVERGE_ADMIN_TOKEN": admin, "METRICS_GH_SECRET": secret},
		"serve", "--config", cfg)

	value := func(series string) string {
		t.Helper()
		r := secDo(t, http.MethodGet, p.url+"/metrics", "", "")
		sc := bufio.NewScanner(strings.NewReader(r.body))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
				return v
			}
		}
		return ""
	}
	accepted := func(kind, source string) string {
		return `converge_events_accepted_total{kind="` + kind + `",source="` + source + `"}`
	}
	superseded := func(kind string) string { return `converge_runs_superseded_total{kind="` + kind + `"}` }
	// want waits for series to reach v (a finish counts after the worker's
	// commit, not before an answer of the API); it goes on when it does
	// not, so that every count missed is reported.
	want := func(series, v string) {
		t.Helper()
		got := value(series)
		for deadline := time.Now().Add(15 * time.Second); got != v && time.Now().Before(deadline); got = value(series) {
			time.Sleep(20 * time.Millisecond)
		}
		if got != v {
			t.Errorf("%s = %q, want %s", series, got, v)
		}
	}
	post := func(path, body string) string {
		t.Helper()
		r := secDo(t, http.MethodPost, p.url+path, admin, body)
		if r.status != http.StatusAccepted {
			t.Fatalf("POST %s %s: %d %s", path, body, r.status, r.body)
		}
		return r.body
	}
	event := func(kind, resource string, version int) string {
		t.Helper()
		return post("/v1/events", fmt.Sprintf(`{"kind":%q,"resource":%q,"version":%d}`, kind, resource, version))
	}
	startWF := func(workflow, resource string, version int) string {
		t.Helper()
		var res struct {
			WorkflowRun struct {
				ID string `json:"id"`
			} `json:"workflow_run"`
		}
		_ = json.Unmarshal([]byte(post("/v1/workflow-runs", fmt.Sprintf(`{"workflow":%q,"resource":%q,"version":%d}`, workflow, resource, version))), &res)
		return res.WorkflowRun.ID
	}
	waitWF := func(id, status string) {
		t.Helper()
		testkit.Eventually(t, 30*time.Second, func() (bool, string) {
			r := secDo(t, http.MethodGet, p.url+"/v1/workflow-runs/"+id, admin, "")
			return strings.Contains(r.body, `"status":"`+status+`"`), "workflow run " + id + ": " + r.body
		})
	}
	for _, s := range []string{accepted("deploy", "workflow"), accepted("build", "workflow"), superseded("build"), superseded("deploy")} {
		if v := value(s); v != "0" {
			t.Fatalf("at start-up %s = %q, want 0", s, v)
		}
	}

	// An API event superseding the one before it: counted once.
	event("deploy", "block/api", 1)
	if body := event("deploy", "block/api", 2); !strings.Contains(body, `"superseded_runs":["`) {
		t.Fatalf("version 2 superseded nothing: %s", body)
	}
	want(superseded("deploy"), "1")
	want(accepted("deploy", "api"), "2")

	// A workflow of two steps: the second is accepted by the first's
	// success, in the worker's finish, and counted with its kind.
	waitWF(startWF("release", "app/two", 1), "succeeded")
	want(accepted("build", "workflow"), "1")
	want(accepted("deploy", "workflow"), "1")

	// A workflow run's start whose root step supersedes the step of the
	// version before it.
	v1 := startWF("release", "block/wf", 1)
	startWF("release", "block/wf", 2)
	waitWF(v1, "superseded")
	want(superseded("build"), "1")
	want(accepted("build", "workflow"), "3")

	// A step accepted by a finish, superseding an API event's run.
	event("deploy", "block/fin", 1)
	startWF("promote", "fin", 2)
	want(accepted("deploy", "workflow"), "2")
	want(superseded("deploy"), "2")

	// A hook's event (version auto: 2) superseding an API event's run.
	event("deploy", "block/hook", 1)
	push := []byte(`{"repository":"block/hook"}`)
	if status := testkit.PostGitHubPush(t, p.url+"/hooks/gh", secret, "d1", push); status != http.StatusAccepted {
		t.Fatalf("delivery: %d", status)
	}
	want(superseded("deploy"), "3")
	want(accepted("deploy", "gh"), "1")

	// Nothing was counted twice, nor late: every series as it should end.
	for series, v := range map[string]string{
		accepted("deploy", "api"): "4", accepted("build", "api"): "0", accepted("deploy", "gh"): "1", accepted("build", "gh"): "0",
		accepted("build", "workflow"): "4", accepted("deploy", "workflow"): "2",
		superseded("build"): "1", superseded("deploy"): "3",
	} {
		if got := value(series); got != v {
			t.Errorf("%s = %q, want %s", series, got, v)
		}
	}
}
