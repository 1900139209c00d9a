package observability

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/converge-run/converge/test/cvproc"
	"github.com/converge-run/converge/test/pgtest"
	"github.com/converge-run/converge/test/testkit"
)

// The secrets of the scenario: each must never appear in a log line or an
// exported span.
const (
	scenarioAdminToken   = "scenario-admin-SECRET-token-5b1e0c2a9f"
	scenarioSourceSecret = "scenario-github-SECRET-7c41d09e22"
	scenarioTargetAuth   = "scenario-target-SECRET-bearer-93ad0f"
	scenarioTargetQuery  = "scenario-query-SECRET-key-e81b7d"
	scenarioDBPassword   = "scenario-db-SECRET-pw-4f2c"
)

// scenarioTarget answers 200 except for resources starting with "bad/"
// (400: a permanent failure); it checks the configured credential arrived
// and echoes it in a failure's body (a target that repeats what it was
// sent), which converge must redact.
type scenarioTarget struct {
	srv *httptest.Server

	mu  sync.Mutex
	bad []string
}

func newScenarioTarget(t *testing.T) *scenarioTarget {
	st := &scenarioTarget{}
	st.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Resource string `json:"resource"`
		}
		_ = json.NewDecoder(r.Body).Decode(&body)
		if r.Header.Get("Authorization") != "Bearer "+scenarioTargetAuth || r.URL.Query().Get("key") != scenarioTargetQuery {
			st.mu.Lock()
			st.bad = append(st.bad, r.URL.String())
			st.mu.Unlock()
		}
		if strings.HasPrefix(body.Resource, "bad/") {
			http.Error(w, "refused request with Authorization "+r.Header.Get("Authorization"), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
	t.Cleanup(st.srv.Close)
	return st
}

// TestScenarioCountersAndSecrets runs `converge serve` (the real binary,
// debug logs, tracing on to an OTLP receiver of the test) through a whole
// scenario: tokens made with `converge token create` and used on the API
// and the dashboard, an HTTP target with a credential in a header and in
// its query, a signed GitHub source (accepted, ignored and badly signed
// deliveries), workflow runs that succeed, fail, are superseded and
// cancelled, a dead letter redriven, and a DATABASE_URL with a password.
// It checks converge_workflow_runs_total and converge_deliveries_total on
// /metrics (at zero from start-up, then counted), and that no secret of
// the scenario is in any log line or exported span.
func TestScenarioCountersAndSecrets(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	u, err := url.Parse(db)
	if err != nil {
		t.Fatal(err)
	}
	// The test cluster trusts local connections: the password is sent
	// and ignored, which is all this needs.
	u.User = url.UserPassword(u.User.Username(), scenarioDBPassword)
	if u.User.Username() == "" {
		u.User = url.UserPassword("postgres", scenarioDBPassword)
	}
	dbURL := u.String()
	rc := newOTLPReceiver(t)
	target := newScenarioTarget(t)
	cfg := testkit.ConfigFile(t, fmt.Sprintf(`listen: 127.0.0.1:0
log_level: debug
river: {fetch_poll_interval: 20ms}
kinds:
  build:
    target:
      http:
        url: %[1]s/build?key=%[2]s
        timeout: 10s
        headers: {Authorization: "Bearer %[3]s"}
    max_attempts: 1
  ship:
    target:
      http:
        url: %[1]s/ship?key=%[2]s
        timeout: 10s
        headers: {Authorization: "Bearer %[3]s"}
    max_attempts: 1
workflows:
  release:
    steps:
      build: {kind: build}
      ship:  {kind: ship, needs: [build]}
  gated:
    steps:
      ship: {kind: ship, resource: "gated/{resource}", approval: true}
sources:
  gh:
    type: github
    secret_env: SCENARIO_GH_SECRET
    rules:
      - when: 'headers["x-github-event"] == "push"'
        kind: build
        resource: 'body.repository'
        version: auto
`, target.srv.URL, scenarioTargetQuery, scenarioTargetAuth))
	env := cvproc.Env("DATABASE_URL="+dbURL, "CONVERGE_ADMIN_TOKEN="+scenarioAdminToken, "SCENARIO_GH_SECRET="+scenarioSourceSecret,
		"OTEL_EXPORTER_OTLP_ENDPOINT="+rc.URL(), "OTEL_BSP_SCHEDULE_DELAY=100")

	// A token made by the CLI, as an operator would.
	cmd := exec.CommandContext(t.Context(), cvproc.Build(t), "token", "create", "--name", "oncall", "--role", "operator")
	cmd.Env = env
	tokenOut, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("token create: %v\n%s", err, tokenOut)
	}
	operatorToken := ""
	for f := range strings.FieldsSeq(string(tokenOut)) {
		if strings.HasPrefix(f, "cvg_") {
			operatorToken = f
		}
	}
	if operatorToken == "" {
		t.Fatalf("token create printed no token:\n%s", tokenOut)
	}

	p := cvproc.Start(t, cvproc.Options{Args: []string{"serve", "--config", cfg}, Env: env})
	base := p.URL(t, 60*time.Second)
	cvproc.WaitHTTP(t, base+"/healthz", 10*time.Second)

	start := liveScrape(t, base)
	for _, wf := range []string{"release", "gated"} {
		for _, st := range []string{"running", "waiting", "succeeded", "failed", "superseded", "cancelled"} {
			if v, ok := start.value("converge_workflow_runs_total", "workflow", wf, "status", st); !ok || v != 0 {
				t.Errorf("at start-up converge_workflow_runs_total{workflow=%s,status=%s} = %v (exported %v), want 0", wf, st, v, ok)
			}
		}
	}
	for _, st := range []string{"accepted", "ignored", "rejected"} {
		if v, ok := start.value("converge_deliveries_total", "source", "gh", "status", st); !ok || v != 0 {
			t.Errorf("at start-up converge_deliveries_total{source=gh,status=%s} = %v (exported %v), want 0", st, v, ok)
		}
	}

	call := func(token, method, path string, body any, out any) int {
		t.Helper()
		var rd io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = bytes.NewReader(b)
		}
		req, err := http.NewRequestWithContext(t.Context(), method, base+path, rd)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer func() { _ = resp.Body.Close() }()
		data, _ := io.ReadAll(resp.Body)
		if out != nil {
			_ = json.Unmarshal(data, out)
		}
		return resp.StatusCode
	}
	type wfRun struct {
		ID     string `json:"id"`
		Status string `json:"status"`
	}
	startWF := func(workflow, resource string, version int) wfRun {
		t.Helper()
		var res struct {
			WorkflowRun wfRun `json:"workflow_run"`
		}
		if got := call(operatorToken, http.MethodPost, "/v1/workflow-runs", map[string]any{"workflow": workflow, "resource": resource, "version": version}, &res); got != http.StatusAccepted {
			t.Fatalf("start %s %s v%d: %d", workflow, resource, version, got)
		}
		return res.WorkflowRun
	}
	waitWF := func(id, status string) {
		t.Helper()
		testkit.Eventually(t, 30*time.Second, func() (bool, string) {
			var w wfRun
			call(operatorToken, http.MethodGet, "/v1/workflow-runs/"+id, nil, &w)
			return w.Status == status, "workflow run " + id + " is " + w.Status + ", want " + status
		})
	}

	// Workflow runs: one succeeds; one fails (its build step is refused);
	// a gated one waits for approval and is superseded by the next
	// version, which is cancelled.
	ok := startWF("release", "app/ok", 1)
	failed := startWF("release", "bad/app", 1)
	g1 := startWF("gated", "app", 1)
	waitWF(ok.ID, "succeeded")
	waitWF(failed.ID, "failed")
	waitWF(g1.ID, "waiting")
	g2 := startWF("gated", "app", 2)
	waitWF(g1.ID, "superseded")
	if got := call(scenarioAdminToken, http.MethodPost, "/v1/workflow-runs/"+g2.ID+"/cancel", map[string]any{"reason": "scenario"}, nil); got != http.StatusOK {
		t.Fatalf("cancel workflow run: %d", got)
	}
	waitWF(g2.ID, "cancelled")

	// The failed step's dead letter, redriven (it fails again).
	var dls struct {
		Items []struct {
			ID string `json:"id"`
		} `json:"items"`
	}
	call(operatorToken, http.MethodGet, "/v1/dead-letters?status=open", nil, &dls)
	if len(dls.Items) != 1 {
		t.Fatalf("open dead letters: %+v, want 1", dls.Items)
	}
	if got := call(operatorToken, http.MethodPost, "/v1/dead-letters/"+dls.Items[0].ID+"/redrive", map[string]any{"reason": "scenario"}, nil); got != http.StatusAccepted {
		t.Fatalf("redrive: %d", got)
	}
	first := dls.Items[0].ID
	testkit.Eventually(t, 30*time.Second, func() (bool, string) {
		call(operatorToken, http.MethodGet, "/v1/dead-letters?status=open", nil, &dls)
		return len(dls.Items) == 1 && dls.Items[0].ID != first, fmt.Sprintf("open dead letters %+v (the redriven run's, not %s)", dls.Items, first)
	})

	// Deliveries of the GitHub source: two accepted (one sent twice: counted
	// once), one ignored (no rule matches), one rejected (its rule's
	// resource fails: mapping-failed), and two refused before being
	// recorded (badly signed, too large: not deliveries, not counted).
	deliver := func(id, event string, body []byte, secret string) int {
		t.Helper()
		mac := hmac.New(sha256.New, []byte(secret))
		mac.Write(body)
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/hooks/gh", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-GitHub-Event", event)
		req.Header.Set("X-GitHub-Delivery", id)
		req.Header.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac.Sum(nil)))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	push := []byte(`{"repository":"app/hooked"}`)
	for _, c := range []struct {
		id, event string
		body      []byte
		secret    string
		want      int
	}{
		{"d1", "push", push, scenarioSourceSecret, http.StatusAccepted},
		{"d1", "push", push, scenarioSourceSecret, http.StatusOK},
		{"d2", "push", []byte(`{"repository":"app/other"}`), scenarioSourceSecret, http.StatusAccepted},
		{"d3", "issues", push, scenarioSourceSecret, http.StatusAccepted},
		{"d4", "push", push, "not-the-secret", http.StatusUnauthorized},
		{"d5", "push", bytes.Repeat([]byte(" "), 300000), scenarioSourceSecret, http.StatusRequestEntityTooLarge},
		{"d6", "push", []byte(`{"no_repository":true}`), scenarioSourceSecret, http.StatusUnprocessableEntity},
	} {
		if got := deliver(c.id, c.event, c.body, c.secret); got != c.want {
			t.Errorf("delivery %s (%s): %d, want %d", c.id, c.event, got, c.want)
		}
	}

	// The dashboard, signed in with the operator token.
	dash := dashboardClient(t, base, operatorToken)
	_ = dash(t, "/ui/dead-letters")

	var page livePage
	testkit.Eventually(t, 30*time.Second, func() (bool, string) {
		page = liveScrape(t, base)
		v, _ := page.value("converge_workflow_runs_total", "workflow", "release", "status", "failed")
		return v == 2, fmt.Sprintf("converge_workflow_runs_total{release,failed} = %v (the first failure and the redrive's)", v)
	})
	for _, c := range []struct {
		labels []string
		want   float64
	}{
		// Both starts, and the failed run's redrive (failed -> running).
		{[]string{"workflow", "release", "status", "running"}, 3},
		{[]string{"workflow", "release", "status", "succeeded"}, 1},
		{[]string{"workflow", "release", "status", "superseded"}, 0},
		{[]string{"workflow", "gated", "status", "waiting"}, 2},
		{[]string{"workflow", "gated", "status", "superseded"}, 1},
		{[]string{"workflow", "gated", "status", "cancelled"}, 1},
		{[]string{"workflow", "gated", "status", "succeeded"}, 0},
	} {
		if v, _ := page.value("converge_workflow_runs_total", c.labels...); v != c.want {
			t.Errorf("converge_workflow_runs_total%v = %v, want %v", c.labels, v, c.want)
		}
	}
	for _, c := range []struct {
		status string
		want   float64
	}{{"accepted", 2}, {"ignored", 1}, {"rejected", 1}} {
		if v, _ := page.value("converge_deliveries_total", "source", "gh", "status", c.status); v != c.want {
			t.Errorf("converge_deliveries_total{source=gh,status=%s} = %v, want %v", c.status, v, c.want)
		}
	}
	if v, _ := page.value("converge_events_accepted_total", "kind", "build", "source", "gh"); v != 2 {
		t.Errorf("converge_events_accepted_total{kind=build,source=gh} = %v, want 2", v)
	}

	p.Stop()
	target.mu.Lock()
	if len(target.bad) > 0 {
		t.Errorf("target calls without the configured credentials: %v", target.bad)
	}
	target.mu.Unlock()

	// No secret anywhere in what converge wrote or exported.
	logs := p.Stderr() + p.Stdout()
	if !strings.Contains(logs, `"msg":"event accepted"`) && !strings.Contains(logs, `"msg":"attempt failed"`) {
		t.Fatalf("the scenario logged nothing expected; logs:\n%s", cvproc.LastLines(logs, 20))
	}
	spans, _ := rc.snapshot()
	if len(spans) == 0 {
		t.Fatal("no spans exported")
	}
	var exported strings.Builder
	for _, s := range spans {
		fmt.Fprintf(&exported, "%s %v\n", s.name, s.attrs)
	}
	for _, secret := range []string{scenarioAdminToken, operatorToken, scenarioSourceSecret, scenarioTargetAuth, scenarioTargetQuery, scenarioDBPassword} {
		if i := strings.Index(logs, secret); i >= 0 {
			t.Errorf("the logs hold the secret %q: ...%s...", secret, logs[max(0, i-200):min(len(logs), i+len(secret)+50)])
		}
		if i := strings.Index(exported.String(), secret); i >= 0 {
			t.Errorf("an exported span holds the secret %q: ...%s...", secret, exported.String()[max(0, i-200):min(exported.Len(), i+len(secret)+50)])
		}
	}
	t.Logf("%d bytes of logs and %d spans checked for %d secrets", len(logs), len(spans), 6)
}
