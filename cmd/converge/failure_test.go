package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/converge-run/converge/test/pgtest"
	"github.com/converge-run/converge/test/testkit"
)

// wantProblemLine checks that stdout is exactly one line, a problem body
// (SPEC §4) of slug and status whose detail holds detail, and that err is
// a failure (exit 1, not a usage error's 2).
func wantProblemLine(t *testing.T, what, stdout string, err error, slug string, status int, detail string) map[string]any {
	t.Helper()
	if err == nil || exitCode(err, new(strings.Builder)) != 1 {
		t.Errorf("%s: %v, want a failure (exit 1)", what, err)
	}
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	var p map[string]any
	if len(lines) != 1 || json.Unmarshal([]byte(lines[0]), &p) != nil {
		t.Fatalf("%s: stdout %q, want one problem body", what, stdout)
	}
	if p["type"] != "urn:converge:problem:"+slug || p["status"] != float64(status) || p["title"] == "" || p["title"] == nil ||
		!strings.Contains(p["detail"].(string), detail) {
		t.Errorf("%s: problem %s, want %s (%d) with a title and a detail holding %q", what, lines[0], slug, status, detail)
	}
	return p
}

const failureConfig = "kinds:\n  build:\n    target: {http: {url: http://127.0.0.1:9000/build}}\n"

// TestLocalFailureJSON: a command that runs here (not through the API)
// prints, with --json, a problem body on failure and exits 1 (SPEC §4):
// prune while another pass holds the lease (conflict), prune without a
// database (unavailable) or with a configuration error (invalid-request
// naming the key), source test of an unknown source (not-found). Without
// --json the same failure prints nothing on standard output. An API client
// command prints its problem once.
func TestLocalFailureJSON(t *testing.T) {
	t.Parallel()
	cfg := testkit.ConfigFile(t, failureConfig)

	t.Run("prune lease held", func(t *testing.T) {
		t.Parallel()
		db := pgtest.NewDatabase(t)
		pool := pgtest.OpenPool(t, db, 1)
		if _, err := pool.Exec(t.Context(), `UPDATE converge_prune_lease SET holder = gen_random_uuid(), expires_at = now() + interval '1 hour' WHERE id`); err != nil {
			t.Fatal(err)
		}
		vars := map[string]string{"DATABASE_URL": db}
		stdout, _, err := secRun(t, vars, "prune", "--config", cfg, "--json")
		wantProblemLine(t, "prune --json, lease held", stdout, err, "conflict", 409, "prune lease")
		stdout, stderr, err := secRun(t, vars, "prune", "--config", cfg)
		if err == nil || stdout != "" || !strings.Contains(stderr, "another pruning pass is running") {
			t.Errorf("prune, lease held: %v, stdout %q, stderr %q; want the text on stderr alone", err, stdout, stderr)
		}
	})
	t.Run("prune no database", func(t *testing.T) {
		t.Parallel()
		stdout, _, err := secRun(t, map[string]string{"DATABASE_URL": "postgres://127.0.0.1:1/none?connect_timeout=2"}, "prune", "--config", cfg, "--json")
		wantProblemLine(t, "prune --json, no database", stdout, err, "unavailable", 503, "connect to database")
	})
	t.Run("prune bad configuration", func(t *testing.T) {
		t.Parallel()
		bad := testkit.ConfigFile(t, failureConfig+"retention: {events: soon}\n")
		stdout, _, err := secRun(t, map[string]string{"DATABASE_URL": "postgres://127.0.0.1:1/none"}, "prune", "--config", bad, "--json")
		p := wantProblemLine(t, "prune --json, bad configuration", stdout, err, "invalid-request", 422, "retention.events")
		if fe, _ := p["errors"].([]any); len(fe) != 1 || fe[0].(map[string]any)["field"] != "retention.events" {
			t.Errorf("problem errors %v, want one naming retention.events", p["errors"])
		}
	})
	t.Run("source test unknown source", func(t *testing.T) {
		t.Parallel()
		body := filepath.Join(t.TempDir(), "body.json")
		if err := os.WriteFile(body, []byte(`{}`), 0o600); err != nil {
			t.Fatal(err)
		}
		stdout, _, err := secRun(t, nil, "source", "test", "gitlab", "--config", cfg, "--file", body, "--json")
		wantProblemLine(t, "source test --json, unknown source", stdout, err, "not-found", 404, `no source "gitlab"`)
	})
	t.Run("source test file missing", func(t *testing.T) {
		t.Parallel()
		// A usage error: exit 2, an invalid-request problem naming --file.
		stdout, _, err := secRun(t, nil, "source", "test", "github", "--config", cfg, "--file", filepath.Join(t.TempDir(), "none.json"), "--json")
		p, perr := oneProblem(stdout)
		if code := exitCode(err, &strings.Builder{}); code != 2 || perr != nil || p.Type != "urn:converge:problem:invalid-request" || !strings.Contains(p.Detail, "--file") {
			t.Errorf("source test with a missing --file: exit %d, stdout %q (%v); want 2 and a problem naming --file", code, stdout, perr)
		}
	})
	t.Run("api client", func(t *testing.T) {
		t.Parallel()
		stdout, _, err := secRun(t, nil, "dlq", "list", "--url", "http://127.0.0.1:1", "--json")
		wantProblemLine(t, "dlq list --json, no API", stdout, err, "unavailable", 503, "cannot reach")
	})
}

// TestMigrateUpWaitsWholeWait: migrate up waits for an unreachable database
// for all of --wait (SPEC §15), its last try made as the wait ends, not a
// pause before it (with --wait 2s it gave up after 1.75 s: 250 ms + 500 ms +
// 1 s of pauses, the next one of 2 s being longer than what was left), and
// then fails naming --wait.
func TestMigrateUpWaitsWholeWait(t *testing.T) {
	t.Parallel()
	cfg := testkit.ConfigFile(t, failureConfig)
	vars := map[string]string{"DATABASE_URL": "postgres://127.0.0.1:1/none?connect_timeout=2"}
	const wait = 2 * time.Second
	start := time.Now()
	_, stderr, err := secRun(t, vars, "migrate", "up", "--config", cfg, "--wait", wait.String())
	took := time.Since(start)
	if err == nil || !strings.Contains(err.Error(), "did not accept connections within --wait 2s") {
		t.Fatalf("migrate up: %v (%s), want a failure naming --wait", err, stderr)
	}
	if took < wait || took > wait+5*time.Second {
		t.Errorf("migrate up --wait %s gave up after %s, want about %s", wait, took.Round(time.Millisecond), wait)
	}
}
