package e2e

import (
	"encoding/json"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/converge-run/converge/test/cvproc"
	"github.com/converge-run/converge/test/pgtest"
	"github.com/converge-run/converge/test/testkit"
)

// pruneCounts runs `converge prune --json` (with --dry-run when dry) and
// returns its deleted counts.
func pruneCounts(t *testing.T, env []string, cfg string, dry bool) map[string]float64 {
	t.Helper()
	args := []string{"prune", "--json", "--config", cfg}
	if dry {
		args = append(args, "--dry-run")
	}
	code, stdout, stderr := run(t, env, args...)
	if code != 0 {
		t.Fatalf("converge %v: exit %d\n%s%s", args, code, stdout, stderr)
	}
	var out struct {
		DryRun  bool               `json:"dry_run"`
		Deleted map[string]float64 `json:"deleted"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(stdout)), &out); err != nil {
		t.Fatalf("converge %v printed %q: %v", args, stdout, err)
	}
	if out.DryRun != dry {
		t.Fatalf("converge %v: dry_run %v", args, out.DryRun)
	}
	return out.Deleted
}

// TestPruneBinary: `converge prune --dry-run` counts what a pass would
// delete and deletes nothing; `converge prune` deletes it (the older
// finished events of a stream, not its latest one, nor an event with an
// open dead letter), writes its audit entry, and a replay of a pruned
// event is then 409 stale-version; bad retention values stop the command
// naming the key.
func TestPruneBinary(t *testing.T) {
	t.Parallel()
	db := pgtest.EmptyDatabase(t)
	target := newFakeTarget(t)
	cfg := testkit.ConfigFile(t, serveConfig(db, target.srv.URL, "10s")+"retention: {runs: 1s, dead_letters: 1s, workflow_runs: 1s, interval: 0}\n")
	env := cvproc.Env("CONVERGE_ADMIN_TOKEN=" + adminToken)
	if code, stdout, stderr := run(t, env, "migrate", "up", "--config", cfg); code != 0 {
		t.Fatalf("migrate up: exit %d\n%s%s", code, stdout, stderr)
	}
	p := start(t, env, "serve", "--config", cfg)
	c := client{base: p.URL(t, 30*time.Second), token: adminToken}
	cvproc.WaitHTTP(t, c.base+"/healthz", 10*time.Second)

	var ids []string
	for v := int64(1); v <= 3; v++ {
		id := c.submit(t, "build", "app/prune", v, map[string]any{"n": v})
		c.waitEvent(t, id, 20*time.Second)
		ids = append(ids, id)
	}
	failed := c.submit(t, "build", "app/fails", 1, map[string]any{"fail": "permanent"})
	c.waitEvent(t, failed, 20*time.Second)
	c.submit(t, "build", "app/fails", 2, map[string]any{"fail": "permanent"})

	// Once a second has passed, a dry run finds v1 and v2 of app/prune
	// (v3 is the stream's latest; app/fails v1 has an open dead letter).
	testkit.Eventually(t, 20*time.Second, func() (bool, string) {
		n := pruneCounts(t, env, cfg, true)
		return n["events"] == 2, "dry run: want 2 events"
	})
	dry := pruneCounts(t, env, cfg, true)
	for id, want := range map[string]int{ids[0]: 200, ids[1]: 200, ids[2]: 200, failed: 200} {
		if status, _ := c.do(t, http.MethodGet, "/v1/events/"+id, nil); status != want {
			t.Errorf("after the dry run GET /v1/events/%s = %d, want %d", id, status, want)
		}
	}
	done := pruneCounts(t, env, cfg, false)
	if done["events"] != 2 || done["runs"] != 2 || done["attempts"] != 2 || done["events"] != dry["events"] || done["runs"] != dry["runs"] {
		t.Errorf("prune deleted %v (dry run counted %v), want 2 events, runs and attempts", done, dry)
	}
	for id, want := range map[string]int{ids[0]: 404, ids[1]: 404, ids[2]: 200, failed: 200} {
		if status, _ := c.do(t, http.MethodGet, "/v1/events/"+id, nil); status != want {
			t.Errorf("after prune GET /v1/events/%s = %d, want %d", id, status, want)
		}
	}
	status, body := c.do(t, http.MethodPost, "/v1/events", map[string]any{"kind": "build", "resource": "app/prune", "version": 1, "payload": map[string]any{"n": 1}})
	if status != http.StatusConflict || body["type"] != "urn:converge:problem:stale-version" || body["latest_version"] != float64(3) {
		t.Errorf("replay of a pruned event: %d %v, want 409 stale-version with latest_version 3", status, body)
	}
	status, body = c.do(t, http.MethodPost, "/v1/events", map[string]any{"kind": "build", "resource": "app/prune", "version": 3, "payload": map[string]any{"n": 3}})
	if status != http.StatusOK {
		t.Errorf("replay of the kept latest event: %d %v, want 200", status, body)
	}
	status, body = c.do(t, http.MethodGet, "/v1/audit", nil)
	found := false
	for _, it := range body["items"].([]any) {
		e := it.(map[string]any)
		if e["action"] == "retention.prune" && e["actor"] == "system" {
			found = true
		}
	}
	if status != 200 || !found {
		t.Errorf("GET /v1/audit: %d, no retention.prune entry by system: %v", status, body)
	}

	code, stdout, stderr := run(t, env, "prune", "--config", cfg)
	if code != 0 || !strings.Contains(stdout, "events") || !strings.Contains(stdout, "total") {
		t.Errorf("converge prune (table): exit %d\n%s%s", code, stdout, stderr)
	}
	bad := testkit.ConfigFile(t, serveConfig(db, target.srv.URL, "10s")+"retention: {runs: -1d}\n")
	if code, _, stderr := run(t, env, "prune", "--config", bad); code != 1 || !strings.Contains(stderr, "retention.runs") {
		t.Errorf("converge prune with runs -1d: exit %d, stderr %q; want 1 naming retention.runs", code, stderr)
	}
	if code, _, stderr := run(t, env, "serve", "--config", bad); code != 1 || !strings.Contains(stderr, "retention.runs") {
		t.Errorf("converge serve with runs -1d: exit %d, stderr %q; want 1 naming retention.runs", code, stderr)
	}
	p.Signal(t, syscall.SIGTERM)
	if code := p.Wait(t, 30*time.Second); code != 0 {
		t.Errorf("serve exited %d after SIGTERM, want 0", code)
	}
}
