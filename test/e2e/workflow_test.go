package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/converge-run/converge/test/cvproc"
	"github.com/converge-run/converge/test/invariant"
	"github.com/converge-run/converge/test/pgtest"
	"github.com/converge-run/converge/test/testkit"
)

// releaseWorkflow is the workflow of SPEC §10 without the approval: build,
// then staging and canary, then prod once both succeeded.
const releaseWorkflow = `workflows:
  release:
    steps:
      build:   {kind: build}
      staging: {kind: deploy, resource: "staging/{resource}", needs: [build]}
      canary:  {kind: deploy, resource: "canary/{resource}", needs: [build]}
      prod:    {kind: deploy, resource: "prod/{resource}", needs: [staging, canary]}
`

// workflowConfig is a configuration with the kinds build and deploy, both
// pointing at targetURL (…/build and …/deploy), and then extra (workflows).
func workflowConfig(databaseURL, targetURL, rescueAfter, extra string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "listen: 127.0.0.1:0\n%sshutdown_timeout: 5s\nrescue_after: %s\nriver: {fetch_poll_interval: 20ms}\nkinds:\n", databaseYAML(databaseURL), rescueAfter)
	for _, kind := range []string{"build", "deploy"} {
		fmt.Fprintf(&b, "  %s:\n    target:\n      http: {url: %s/%s, timeout: 30s}\n    max_attempts: 5\n    backoff: {initial: 50ms, max: 1s}\n    concurrency: 4\n", kind, targetURL, kind)
	}
	b.WriteString(extra)
	return b.String()
}

// stepTarget records every call and answers each with the output
// {"kind": <kind>, "resource": <resource>}, distinct per step.
type stepTarget struct {
	srv *httptest.Server
	mu  sync.Mutex
	// calls are the request bodies by resource.
	calls map[string][]map[string]any
}

func newStepTarget(t *testing.T) *stepTarget {
	t.Helper()
	st := &stepTarget{calls: map[string][]map[string]any{}}
	st.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var body map[string]any
		_ = json.Unmarshal(b, &body)
		res, _ := body["resource"].(string)
		st.mu.Lock()
		st.calls[res] = append(st.calls[res], body)
		st.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"kind":%q,"resource":%q}`, body["kind"], res)
	}))
	t.Cleanup(st.srv.Close)
	return st
}

func (st *stepTarget) received(resource string) []map[string]any {
	st.mu.Lock()
	defer st.mu.Unlock()
	return append([]map[string]any(nil), st.calls[resource]...)
}

// cli runs the converge CLI against base with the admin token.
func cli(t *testing.T, base string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return run(t, cvproc.Env("CONVERGE_URL="+base, "CONVERGE_TOKEN="+adminToken), args...)
}

// cliJSON runs the CLI and decodes its JSON answer; a non-zero exit fails
// the test.
func cliJSON(t *testing.T, base string, args ...string) map[string]any {
	t.Helper()
	code, stdout, stderr := cli(t, base, args...)
	if code != 0 {
		t.Fatalf("converge %s: exit %d\n%s%s", strings.Join(args, " "), code, stdout, stderr)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(strings.TrimSpace(stdout)), &m); err != nil {
		t.Fatalf("converge %s: not JSON: %v\n%s", strings.Join(args, " "), err, stdout)
	}
	return m
}

// waitWorkflowRun polls `converge workflow show ID --json` until the
// workflow run is final (finished_at set) and returns it.
func waitWorkflowRun(t *testing.T, base, id string, timeout time.Duration) map[string]any {
	t.Helper()
	var w map[string]any
	testkit.Eventually(t, timeout, func() (bool, string) {
		w = cliJSON(t, base, "workflow", "show", id, "--json")
		return w["finished_at"] != nil, fmt.Sprintf("workflow run %s is %v: %v", id, w["status"], w["steps"])
	})
	return w
}

// jsonEqual reports whether a and b encode to the same JSON.
func jsonEqual(a, b any) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	var x, y any
	_ = json.Unmarshal(ja, &x)
	_ = json.Unmarshal(jb, &y)
	ja, _ = json.Marshal(x)
	jb, _ = json.Marshal(y)
	return string(ja) == string(jb)
}

// TestWorkflowBinary runs a fan-out/fan-in workflow through `converge
// serve` and the `converge workflow` CLI, and checks the start-up errors
// of bad workflow configurations.
func TestWorkflowBinary(t *testing.T) {
	t.Parallel()
	pgtest.URL(t)
	cvproc.Build(t)

	t.Run("bad workflow configurations", func(t *testing.T) {
		t.Parallel()
		cycle := `workflows:
  release:
    steps:
      build:   {kind: build, needs: [prod]}
      staging: {kind: deploy, resource: "staging/{resource}", needs: [build]}
      prod:    {kind: deploy, resource: "prod/{resource}", needs: [staging]}
`
		unknownKind := `workflows:
  release:
    steps:
      build:   {kind: build}
      staging: {kind: launch, resource: "staging/{resource}", needs: [build]}
`
		cases := []struct {
			name, extra string
			want        []string
		}{
			{"cycle", cycle, []string{"workflows.release.steps.", ".needs", "cycle"}},
			{"unknown kind", unknownKind, []string{"workflows.release.steps.staging.kind", "launch"}},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				cfg := testkit.ConfigFile(t, workflowConfig("postgres://127.0.0.1:1/x", "http://127.0.0.1:9", "1s", tc.extra))
				started := time.Now()
				code, _, stderr := run(t, cvproc.Env(), "serve", "--config", cfg)
				if took := time.Since(started); took > 15*time.Second {
					t.Errorf("serve took %s to refuse the configuration", took)
				}
				if code == 0 {
					t.Fatalf("serve with a bad workflow exited 0")
				}
				for _, w := range tc.want {
					if !strings.Contains(stderr, w) {
						t.Errorf("stderr %q does not name %q", stderr, w)
					}
				}
			})
		}
	})

	t.Run("release through the CLI", func(t *testing.T) {
		t.Parallel()
		db := pgtest.NewDatabase(t)
		target := newStepTarget(t)
		cfg := testkit.ConfigFile(t, workflowConfig(db, target.srv.URL, "10s", releaseWorkflow))
		p := start(t, cvproc.Env("CONVERGE_ADMIN_TOKEN="+adminToken), "serve", "--config", cfg)
		base := p.URL(t, 30*time.Second)
		cvproc.WaitHTTP(t, base+"/readyz", 30*time.Second)

		startArgs := []string{"workflow", "start", "--workflow", "release", "--resource", "app/web", "--version", "1", "--payload", `{"sha":"abc"}`, "--json"}
		started := cliJSON(t, base, startArgs...)["workflow_run"].(map[string]any)
		id, _ := started["id"].(string)
		if id == "" || started["workflow"] != "release" || started["version"] != float64(1) {
			t.Fatalf("workflow start answered %v", started)
		}

		w := waitWorkflowRun(t, base, id, 60*time.Second)
		if w["status"] != "succeeded" {
			t.Fatalf("workflow run ended %v: %v", w["status"], w["steps"])
		}
		steps := map[string]map[string]any{}
		for _, s := range w["steps"].([]any) {
			s := s.(map[string]any)
			steps[s["name"].(string)] = s
			if s["status"] != "succeeded" || s["event_id"] == nil || s["run_id"] == nil {
				t.Errorf("step %v", s)
			}
		}
		if len(steps) != 4 {
			t.Errorf("steps %v, want build, staging, canary and prod", w["steps"])
		}

		// Each step was called once; prod got the workflow run's payload
		// and the outputs of staging and canary.
		for _, r := range []string{"app/web", "staging/app/web", "canary/app/web", "prod/app/web"} {
			if n := len(target.received(r)); n != 1 {
				t.Errorf("target received %d calls for %s, want 1", n, r)
			}
		}
		if calls := target.received("prod/app/web"); len(calls) > 0 {
			want := map[string]any{
				"payload": map[string]any{"sha": "abc"},
				"needs": map[string]any{
					"staging": map[string]any{"kind": "deploy", "resource": "staging/app/web"},
					"canary":  map[string]any{"kind": "deploy", "resource": "canary/app/web"},
				},
			}
			if !jsonEqual(calls[0]["payload"], want) {
				t.Errorf("prod's payload %v, want %v", invariant.CompactJSON(calls[0]["payload"]), invariant.CompactJSON(want))
			}
			if calls[0]["version"] != float64(1) {
				t.Errorf("prod's version %v, want 1", calls[0]["version"])
			}
		}
		if calls := target.received("app/web"); len(calls) > 0 {
			want := map[string]any{"payload": map[string]any{"sha": "abc"}, "needs": map[string]any{}}
			if !jsonEqual(calls[0]["payload"], want) {
				t.Errorf("build's payload %v, want %v", invariant.CompactJSON(calls[0]["payload"]), invariant.CompactJSON(want))
			}
		}

		// The event of a step carries its workflow run.
		c := client{base: base, token: adminToken}
		if status, ev := c.do(t, http.MethodGet, "/v1/events/"+steps["prod"]["event_id"].(string), nil); status != 200 || ev["workflow_run_id"] != id {
			t.Errorf("prod's event: %d, workflow_run_id %v, want %s", status, ev["workflow_run_id"], id)
		}

		// The list has it.
		list := cliJSON(t, base, "workflow", "list", "--workflow", "release", "--json")
		found := false
		for _, it := range list["items"].([]any) {
			if it.(map[string]any)["id"] == id {
				found = true
			}
		}
		if !found {
			t.Errorf("workflow list does not list %s: %v", id, list)
		}
		if code, stdout, stderr := cli(t, base, "workflow", "list", "--status", "succeeded", "--resource", "app/web"); code != 0 || !strings.Contains(stdout, id) {
			t.Errorf("workflow list (table): exit %d\n%s%s", code, stdout, stderr)
		}
		if code, stdout, stderr := cli(t, base, "workflow", "show", id); code != 0 || !strings.Contains(stdout, "prod/app/web") {
			t.Errorf("workflow show (table): exit %d\n%s%s", code, stdout, stderr)
		}

		// A replay answers 200 with the same workflow run.
		status, body := c.do(t, http.MethodPost, "/v1/workflow-runs", map[string]any{
			"workflow": "release", "resource": "app/web", "version": 1, "payload": map[string]any{"sha": "abc"},
		})
		if wr, _ := body["workflow_run"].(map[string]any); status != 200 || wr["id"] != id {
			t.Errorf("replay: %d %v, want 200 with %s", status, body, id)
		}
		if again := cliJSON(t, base, startArgs...)["workflow_run"].(map[string]any); again["id"] != id {
			t.Errorf("CLI replay answered %v, want %s", again["id"], id)
		}

		// The same version with another payload is version-conflict; a
		// version below the highest started is stale-version: exit 1
		// naming the problem, in --json mode too.
		code, stdout, stderr := cli(t, base, "workflow", "start", "--workflow", "release", "--resource", "app/web", "--version", "1", "--payload", `{"sha":"other"}`, "--json")
		if code != 1 || !strings.Contains(stdout+stderr, "version-conflict") {
			t.Errorf("v1 with another payload: exit %d\n%s%s, want 1 naming version-conflict", code, stdout, stderr)
		}
		v5 := cliJSON(t, base, "workflow", "start", "--workflow", "release", "--resource", "app/web", "--version", "5", "--json")["workflow_run"].(map[string]any)["id"].(string)
		code, stdout, stderr = cli(t, base, "workflow", "start", "--workflow", "release", "--resource", "app/web", "--version", "4", "--json")
		if code != 1 || !strings.Contains(stdout+stderr, "stale-version") {
			t.Errorf("v4 after v5: exit %d\n%s%s, want 1 naming stale-version", code, stdout, stderr)
		}

		// An unknown workflow is 422 invalid-request.
		status, body = c.do(t, http.MethodPost, "/v1/workflow-runs", map[string]any{"workflow": "nope", "resource": "app/web", "version": 3})
		if status != 422 || !strings.HasSuffix(fmt.Sprint(body["type"]), "invalid-request") {
			t.Errorf("unknown workflow: %d %v, want 422 invalid-request", status, body)
		}
		code, stdout, stderr = cli(t, base, "workflow", "start", "--workflow", "nope", "--resource", "app/web", "--version", "3", "--json")
		if code != 1 || !strings.Contains(stdout+stderr, "invalid-request") {
			t.Errorf("CLI unknown workflow: exit %d\n%s%s", code, stdout, stderr)
		}

		// Cancelling a finished workflow run is run-finished.
		code, stdout, stderr = cli(t, base, "workflow", "cancel", id, "--json")
		if code != 1 || !strings.Contains(stdout+stderr, "run-finished") {
			t.Errorf("cancel of a finished run: exit %d\n%s%s, want 1 naming run-finished", code, stdout, stderr)
		}
		if w := waitWorkflowRun(t, base, v5, 60*time.Second); w["status"] != "succeeded" {
			t.Errorf("v5 ended %v: %v", w["status"], w["steps"])
		}

		// `workflow` alone is a usage error.
		if code, _, stderr := cli(t, base, "workflow"); code != 2 || !strings.Contains(stderr, "start, list, show or cancel") {
			t.Errorf("workflow without a command: exit %d, %q; want 2", code, stderr)
		}

		p.Signal(t, syscall.SIGTERM)
		if code := p.Wait(t, 30*time.Second); code != 0 {
			t.Errorf("serve exited %d after SIGTERM", code)
		}
	})
}
