package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/converge-run/converge/test/cvproc"
	"github.com/converge-run/converge/test/pgtest"
	"github.com/converge-run/converge/test/testkit"
)

// adminToken is CONVERGE_ADMIN_TOKEN of the serve tests.
const adminToken = "e2e-admin-token-abcdefghijklmnop"

// targetCall is one call a fake target received.
type targetCall struct {
	runID, attempt string
	body           map[string]any
}

// fakeTarget answers a payload {"fail":"permanent"} with 422, one with
// {"block":true} only once released (or when the caller hangs up), and
// anything else with 200.
type fakeTarget struct {
	srv     *httptest.Server
	arrived chan string // run id of each call, as it arrives
	release chan struct{}
	once    sync.Once

	mu    sync.Mutex
	calls []targetCall
}

func newFakeTarget(t *testing.T) *fakeTarget {
	t.Helper()
	f := &fakeTarget{arrived: make(chan string, 100), release: make(chan struct{})}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		b, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(b, &body)
		c := targetCall{runID: r.Header.Get("Idempotency-Key"), attempt: r.Header.Get("Converge-Attempt"), body: body}
		f.mu.Lock()
		f.calls = append(f.calls, c)
		f.mu.Unlock()
		f.arrived <- c.runID
		payload, _ := body["payload"].(map[string]any)
		w.Header().Set("Content-Type", "application/json")
		switch {
		case payload["fail"] == "permanent":
			w.WriteHeader(http.StatusUnprocessableEntity)
			_, _ = io.WriteString(w, `{"error":"invalid build definition"}`)
			return
		case payload["block"] == true:
			select {
			case <-f.release:
			case <-r.Context().Done():
				return
			}
		}
		_, _ = fmt.Fprintf(w, `{"built":%q}`, body["resource"])
	}))
	t.Cleanup(func() {
		f.unblock()
		f.srv.Close()
	})
	return f
}

// unblock lets blocked calls, and every later one, answer.
func (f *fakeTarget) unblock() { f.once.Do(func() { close(f.release) }) }

func (f *fakeTarget) received() []targetCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]targetCall(nil), f.calls...)
}

// serveConfig is a configuration for `converge serve` against target.
func serveConfig(databaseURL, targetURL, shutdownTimeout string) string {
	return fmt.Sprintf(`listen: 127.0.0.1:0
%sshutdown_timeout: %s
river: {fetch_poll_interval: 20ms}
kinds:
  build:
    target:
      http: {url: %s/build, timeout: 20s}
    max_attempts: 3
    backoff: {initial: 50ms, max: 1s}
    concurrency: 4
`, databaseYAML(databaseURL), shutdownTimeout, targetURL)
}

// TestBinary builds the binary once and runs its commands as
// subprocesses.
func TestBinary(t *testing.T) {
	t.Parallel()
	pgtest.URL(t)   // skips or fails before building when there is no database
	cvproc.Build(t) // once, before the subtests
	env := cvproc.Env()

	t.Run("version", func(t *testing.T) {
		t.Parallel()
		code, stdout, _ := run(t, env, "version")
		if code != 0 || strings.TrimSpace(stdout) != "converge "+cvproc.Version {
			t.Errorf("version: exit %d, output %q", code, stdout)
		}
	})

	t.Run("usage and configuration errors", func(t *testing.T) {
		t.Parallel()
		bad := testkit.ConfigFile(t, "kinds:\n  build:\n    target: {http: {url: http://127.0.0.1:9/build}}\n    max_attempts: -1\n")
		badDuration := testkit.ConfigFile(t, "rescue_after: soon\n")
		noTarget := testkit.ConfigFile(t, "kinds:\n  deploy:\n    max_attempts: 3\n")
		cases := []struct {
			name   string
			args   []string
			env    []string
			code   int
			stderr string
		}{
			{"unknown flag", []string{"serve", "--bogus"}, env, 2, "unknown flag"},
			{"unknown command", []string{"bogus"}, env, 2, "unknown command"},
			{"extra argument", []string{"version", "extra"}, env, 2, ""},
			{"bad max_attempts", []string{"serve", "--config", bad}, cvproc.Env("DATABASE_URL=postgres://127.0.0.1:1/x"), 1, "kinds.build.max_attempts"},
			{"bad duration", []string{"serve", "--config", badDuration}, cvproc.Env("DATABASE_URL=postgres://127.0.0.1:1/x"), 1, "rescue_after"},
			{"no target", []string{"worker", "--config", noTarget}, cvproc.Env("DATABASE_URL=postgres://127.0.0.1:1/x"), 1, "kinds.deploy.target"},
			{"config from the environment", []string{"api"}, cvproc.Env("CONVERGE_CONFIG="+bad, "DATABASE_URL=postgres://127.0.0.1:1/x"), 1, "kinds.build.max_attempts"},
			{"no database", []string{"serve"}, env, 1, "database_url"},
			{"bad database url", []string{"migrate", "up"}, cvproc.Env("DATABASE_URL=mysql://db/x"), 1, "database_url"},
			{"missing config file", []string{"serve", "--config", filepath.Join(t.TempDir(), "nope.yaml")}, env, 1, "nope.yaml"},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				code, _, stderr := run(t, tc.env, tc.args...)
				if code != tc.code || !strings.Contains(stderr, tc.stderr) {
					t.Errorf("converge %v: exit %d, stderr %q; want exit %d naming %q", tc.args, code, stderr, tc.code, tc.stderr)
				}
			})
		}
	})

	t.Run("migrate and serve", func(t *testing.T) {
		t.Parallel()
		db := pgtest.EmptyDatabase(t)
		target := newFakeTarget(t)
		cfg := testkit.ConfigFile(t, serveConfig(db, target.srv.URL, "10s"))
		env := cvproc.Env("CONVERGE_ADMIN_TOKEN=" + adminToken)

		code, stdout, _ := run(t, env, "migrate", "status", "--config", cfg)
		if code != 0 || !strings.Contains(stdout, "pending") {
			t.Errorf("status of an empty database: exit %d, %q", code, stdout)
		}
		if code, stdout, stderr := run(t, env, "migrate", "up", "--config", cfg); code != 0 {
			t.Fatalf("migrate up: exit %d\n%s%s", code, stdout, stderr)
		}
		code, stdout, _ = run(t, env, "migrate", "status", "--config", cfg)
		if code != 0 || strings.Contains(stdout, "pending") {
			t.Errorf("status after up: exit %d, %q", code, stdout)
		}

		p := start(t, env, "serve", "--config", cfg)
		c := client{base: p.URL(t, 30*time.Second), token: adminToken}
		cvproc.WaitHTTP(t, c.base+"/healthz", 10*time.Second)
		if status, body := (client{base: c.base}).do(t, http.MethodGet, "/readyz", nil); status != 200 {
			t.Errorf("readyz: %d %v", status, body)
		}
		if status, _ := (client{base: c.base}).do(t, http.MethodGet, "/v1/events", nil); status != 401 {
			t.Errorf("GET /v1/events without a token: %d, want 401", status)
		}

		ok := c.submit(t, "build", "app/web", 1, map[string]any{"ref": "main"})
		bad := c.submit(t, "build", "app/api", 1, map[string]any{"fail": "permanent"})
		ev := c.waitEvent(t, ok, 20*time.Second)
		run := ev["runs"].([]any)[0].(map[string]any)
		if ev["status"] != "succeeded" || run["attempts"] != float64(1) {
			t.Errorf("event app/web: %v", ev)
		}
		if out, _ := run["output"].(map[string]any); out["built"] != "app/web" {
			t.Errorf("output %v", run["output"])
		}
		ev = c.waitEvent(t, bad, 20*time.Second)
		run = ev["runs"].([]any)[0].(map[string]any)
		if e, _ := run["error"].(map[string]any); ev["status"] != "failed" || run["attempts"] != float64(1) || e["class"] != "permanent" || e["http_status"] != float64(422) {
			t.Errorf("event app/api: %v", ev)
		}
		status, res := c.do(t, http.MethodGet, "/v1/resources/build/app/web", nil)
		if status != 200 || res["applied_version"] != float64(1) || res["latest_version"] != float64(1) {
			t.Errorf("resource build app/web: %d %v", status, res)
		}

		resp, err := http.Get(c.base + "/metrics")
		if err != nil {
			t.Fatalf("metrics: %v", err)
		}
		metrics, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(metrics), "converge_attempts_total") {
			t.Errorf("metrics: %d, without converge_attempts_total", resp.StatusCode)
		}

		p.Signal(t, syscall.SIGTERM)
		if code := p.Wait(t, 30*time.Second); code != 0 {
			t.Errorf("serve exited %d after SIGTERM, want 0", code)
		}
	})

	t.Run("api and worker processes", func(t *testing.T) {
		t.Parallel()
		db := pgtest.EmptyDatabase(t)
		target := newFakeTarget(t)
		cfg := testkit.ConfigFile(t, serveConfig(db, target.srv.URL, "10s"))
		env := cvproc.Env("CONVERGE_ADMIN_TOKEN=" + adminToken)

		// Before the schema exists the API is up but not ready.
		a := start(t, env, "api", "--config", cfg)
		c := client{base: a.URL(t, 30*time.Second), token: adminToken}
		cvproc.WaitHTTP(t, c.base+"/healthz", 10*time.Second)
		if status, body := (client{base: c.base}).do(t, http.MethodGet, "/readyz", nil); status != http.StatusServiceUnavailable {
			t.Errorf("readyz without a schema: %d %v, want 503", status, body)
		}
		if code, stdout, stderr := run(t, env, "migrate", "up", "--config", cfg); code != 0 {
			t.Fatalf("migrate up: exit %d\n%s%s", code, stdout, stderr)
		}
		testkit.Eventually(t, 10*time.Second, func() (bool, string) {
			status, body := (client{base: c.base}).do(t, http.MethodGet, "/readyz", nil)
			return status == http.StatusOK, fmt.Sprintf("readyz after migrate up: %d %v", status, body)
		})

		// The API accepts; the worker, another process, runs.
		id := c.submit(t, "build", "app/split", 1, map[string]any{"ref": "main"})
		w := start(t, env, "worker", "--config", cfg)
		if ev := c.waitEvent(t, id, 20*time.Second); ev["status"] != "succeeded" {
			t.Errorf("event: %v", ev)
		}
		for _, p := range []*cvproc.Process{w, a} {
			p.Signal(t, syscall.SIGTERM)
			if code := p.Wait(t, 30*time.Second); code != 0 {
				t.Errorf("%s exited %d after SIGTERM, want 0", p.Name(), code)
			}
		}
	})

	// SIGTERM while an attempt is in flight: the attempt finishes within
	// the shutdown timeout, or is cancelled and taken back; either way no
	// attempt is lost or counted twice.
	sigterm := []struct {
		name            string
		shutdownTimeout string
		// releaseFirst releases the target before the process exits; the
		// attempt then finishes in this process.
		releaseFirst bool
	}{
		{"SIGTERM lets the attempt finish", "30s", true},
		{"SIGTERM past the shutdown timeout takes the attempt back", "300ms", false},
	}
	for _, tc := range sigterm {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := pgtest.NewDatabase(t)
			pool := pgtest.OpenPool(t, db, 2)
			target := newFakeTarget(t)
			cfg := testkit.ConfigFile(t, serveConfig(db, target.srv.URL, tc.shutdownTimeout))
			env := cvproc.Env("CONVERGE_ADMIN_TOKEN=" + adminToken)

			p := start(t, env, "serve", "--config", cfg)
			c := client{base: p.URL(t, 30*time.Second), token: adminToken}
			id := c.submit(t, "build", "app/web", 7, map[string]any{"block": true})
			var runID string
			select {
			case runID = <-target.arrived:
			case <-time.After(20 * time.Second):
				t.Fatal("the target was not called")
			}

			p.Signal(t, syscall.SIGTERM)
			p.LogLine(t, "shutting down", 10*time.Second)
			if tc.releaseFirst {
				if !p.Running() {
					t.Fatal("serve exited with an attempt in flight")
				}
				target.unblock()
			}
			if code := p.Wait(t, 30*time.Second); code != 0 {
				t.Fatalf("serve exited %d after SIGTERM, want 0", code)
			}

			state := func() (status string, attempts int, rows []string) {
				t.Helper()
				err := pool.QueryRow(t.Context(), `SELECT status, attempts FROM converge_runs WHERE id = $1`, runID).Scan(&status, &attempts)
				if err != nil {
					t.Fatalf("read run: %v", err)
				}
				r, err := pool.Query(t.Context(), `SELECT number || ':' || coalesce(outcome, 'open') FROM converge_attempts WHERE run_id = $1 ORDER BY number`, runID)
				if err != nil {
					t.Fatalf("read attempts: %v", err)
				}
				defer r.Close()
				for r.Next() {
					var s string
					_ = r.Scan(&s)
					rows = append(rows, s)
				}
				return status, attempts, rows
			}

			if !tc.releaseFirst {
				// Stopped past the timeout: the attempt was taken back.
				status, attempts, rows := state()
				if status != "queued" || attempts != 0 || len(rows) != 0 {
					t.Fatalf("after shutdown: run %s with %d attempts %v, want queued with none", status, attempts, rows)
				}
				target.unblock()
				w := start(t, env, "worker", "--config", cfg)
				testkit.Eventually(t, 20*time.Second, func() (bool, string) {
					s, n, _ := state()
					return s == "succeeded", fmt.Sprintf("run is %s after %d attempts", s, n)
				})
				w.Signal(t, syscall.SIGTERM)
				if code := w.Wait(t, 30*time.Second); code != 0 {
					t.Errorf("worker exited %d after SIGTERM, want 0", code)
				}
			}

			status, attempts, rows := state()
			if status != "succeeded" || attempts != 1 || len(rows) != 1 || rows[0] != "1:succeeded" {
				t.Errorf("run %s with %d attempts %v, want succeeded with 1:succeeded", status, attempts, rows)
			}
			var evStatus string
			if err := pool.QueryRow(t.Context(), `SELECT status FROM converge_runs WHERE event_id = $1 ORDER BY number DESC LIMIT 1`, id).Scan(&evStatus); err != nil || evStatus != "succeeded" {
				t.Errorf("event status %q (%v)", evStatus, err)
			}
			calls := target.received()
			wantCalls := 1
			if !tc.releaseFirst {
				wantCalls = 2 // the cancelled call and the one after the restart
			}
			if len(calls) != wantCalls {
				t.Fatalf("target received %d calls, want %d", len(calls), wantCalls)
			}
			for i, c := range calls {
				if c.runID != runID || c.attempt != "1" {
					t.Errorf("call %d: Idempotency-Key %s, Converge-Attempt %s; want %s, 1", i+1, c.runID, c.attempt, runID)
				}
			}
		})
	}

	devCases := []struct {
		name    string
		private bool // no DATABASE_URL: dev starts its own PostgreSQL
	}{
		{"dev with DATABASE_URL", false},
		{"dev with a private PostgreSQL", true},
	}
	for _, tc := range devCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			args := []string{"dev", "--listen", "127.0.0.1:0", "--demo-latency", "10ms", "--demo-transient", "0", "--demo-permanent", "0"}
			env := cvproc.Env()
			dataDir := ""
			if tc.private {
				dataDir = filepath.Join(t.TempDir(), "pg")
				args = append(args, "--data-dir", dataDir)
			} else {
				env = cvproc.Env("DATABASE_URL=" + pgtest.NewDatabase(t))
			}
			started := time.Now()
			p := start(t, env, args...)
			var base, token string
			apiLine := regexp.MustCompile(`API:\s+(http://\S+)/v1`)
			tokenLine := regexp.MustCompile(`admin token:\s+(\S+)`)
			testkit.Eventually(t, 60*time.Second, func() (bool, string) {
				out := p.Stdout()
				if m := apiLine.FindStringSubmatch(out); m != nil {
					base = m[1]
				}
				if m := tokenLine.FindStringSubmatch(out); m != nil {
					token = m[1]
				}
				if !p.Running() {
					t.Fatalf("dev exited: %v", p.Err())
				}
				return base != "" && token != "", "dev has not printed its URL and admin token"
			})
			cvproc.WaitHTTP(t, base+"/healthz", 30*time.Second)
			took := time.Since(started)
			t.Logf("dev answered /healthz after %s", took)
			if !tc.private && took > 30*time.Second {
				t.Errorf("dev answered /healthz after %s, want within 30s", took)
			}
			c := client{base: base, token: token}
			ev := c.waitEvent(t, c.submit(t, "build", "app/web", 1, map[string]any{"ref": "main"}), 30*time.Second)
			if ev["status"] != "succeeded" {
				t.Errorf("event on the demo target: %v", ev)
			}
			ev = c.waitEvent(t, c.submit(t, "deploy", "prod/web", 1, map[string]any{"fail": "permanent"}), 30*time.Second)
			if ev["status"] != "failed" {
				t.Errorf("event asking the demo target to fail: %v", ev)
			}
			// The banner's database URL is the one the local commands
			// need (token, prune, migrate): the private PostgreSQL's.
			m := regexp.MustCompile(`database:\s+(postgres://\S+)`).FindStringSubmatch(p.Stdout())
			if m == nil {
				t.Errorf("dev printed no database URL:\n%s", p.Stdout())
			} else if code, out, stderr := run(t, cvproc.Env("DATABASE_URL="+m[1]), "migrate", "status"); code != 0 {
				t.Errorf("migrate status with the printed database URL %s: exit %d\n%s%s", m[1], code, out, stderr)
			}
			// Its dead letter is notified to dev's demo receiver, which logs it.
			if rec := p.LogLine(t, "notification", 30*time.Second); rec["type"] != "dead_letter.created" || rec["resource"] != "prod/web" ||
				!strings.Contains(fmt.Sprint(rec["url"]), "/ui/dead-letters/") {
				t.Errorf("dev's notification log %v, want the dead letter of prod/web with its dashboard link", rec)
			}

			p.Signal(t, syscall.SIGTERM)
			if code := p.Wait(t, 60*time.Second); code != 0 {
				t.Errorf("dev exited %d after SIGTERM, want 0", code)
			}
			if tc.private {
				if _, err := os.Stat(filepath.Join(dataDir, "postmaster.pid")); !os.IsNotExist(err) {
					t.Errorf("the private PostgreSQL is still running after dev stopped (postmaster.pid: %v)", err)
				}
			}
		})
	}
}
