package outage

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/converge-run/converge/test/cvproc"
	"github.com/converge-run/converge/test/testkit"
)

// TestOutage starts api, worker and serve processes while the database is
// stopped (before any schema exists), then goes through a restart with the
// processes running and a read-only primary. At every step the processes
// stay up, /healthz is 200, /readyz gives the reason, and writes are
// answered 503 unavailable, not 500.
func TestOutage(t *testing.T) {
	c := newCluster(t)
	tg := newTarget(t)
	// rescue_after 10s: a job River fetched, or whose outcome it was
	// recording, when the database crashed stays running in River until the
	// reconciler rescues it: at once in its quick pass after the outage
	// (TestCrashStrandedJob, with the default rescue_after), otherwise after
	// four of its intervals (rescue_after/4), 10 s here against 60 s with
	// the default 2m; and a run left running is rescued when its lease
	// expires, after rescue_after. Either wait with the default would
	// outlast the recovery waits below.
	cfg := testkit.ConfigFile(t, config(c.url(), tg, "request_timeout: 3s\nrescue_after: 10s\n"))
	c.stop()

	// migrate up without waiting long gives up, naming --wait.
	short := cvproc.Start(t, cvproc.Options{Args: []string{"migrate", "up", "--wait", "1s", "--config", cfg}, Env: cvproc.Env()})
	if code := short.Wait(t, 30*time.Second); code != 1 || !strings.Contains(short.Stderr(), "--wait") {
		t.Errorf("migrate up --wait 1s with the database down: exit %d, stderr %s; want 1 naming --wait", code, cvproc.LastLines(short.Stderr(), 5))
	}

	// Started while the database is down: they stay up and are not ready.
	api, apiURL := proc(t, "api", "--config", cfg)
	worker, workerURL := proc(t, "worker", "--config", cfg)
	serve, serveURL := proc(t, "serve", "--config", cfg)
	migrate := cvproc.Start(t, cvproc.Options{Args: []string{"migrate", "up", "--config", cfg}, Env: cvproc.Env()})
	time.Sleep(2 * time.Second)
	procs := []*cvproc.Process{api, worker, serve}
	alive := func(when string) {
		t.Helper()
		for _, p := range procs {
			if !p.Running() {
				t.Fatalf("%s: converge %s exited: %v\n%s", when, p.Name(), p.Err(), cvproc.LastLines(p.Stderr(), 20))
			}
		}
	}
	alive("database down at start")
	if !migrate.Running() {
		t.Fatalf("migrate up (default --wait 60s) did not wait for the database: %v\n%s", migrate.Err(), migrate.Stderr())
	}
	for _, u := range []string{apiURL, workerURL, serveURL} {
		wantNotReady(t, u, "database unreachable")
	}
	wantUnavailable(t, "POST /v1/events with the database down", submit(t, apiURL, "app/down", 1))
	wantUnavailable(t, "GET /v1/events with the database down", call(t, apiURL, http.MethodGet, "/v1/events", nil))
	// The dashboard shows a readable page, not an internal error.
	form := url.Values{"token": {"cvt_not-a-stored-token"}}
	resp, err := http.PostForm(serveURL+"/ui/sign-in", form)
	if err != nil {
		t.Fatal(err)
	}
	page := readAll(resp)
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(page, "Service unavailable") || resp.Header.Get("Retry-After") == "" {
		t.Errorf("dashboard sign-in with the database down: %d (Retry-After %q), want a 503 page\n%s", resp.StatusCode, resp.Header.Get("Retry-After"), page)
	}

	// The database starts: migrate up finishes, everyone becomes ready and
	// the workers run what the API accepts.
	c.start()
	if code := migrate.Wait(t, 60*time.Second); code != 0 {
		t.Fatalf("migrate up after the database started: exit %d\n%s", code, migrate.Stderr())
	}
	for _, u := range []string{apiURL, workerURL, serveURL} {
		waitReady(t, u, 30*time.Second)
	}
	alive("after the database started")
	waitSucceeded(t, apiURL, eventID(t, submit(t, apiURL, "app/web", 1)), 30*time.Second)

	t.Run("restart while running", func(t *testing.T) {
		c.stop()
		time.Sleep(500 * time.Millisecond)
		wantUnavailable(t, "POST /v1/events while the database is stopped", submit(t, apiURL, "app/web", 2))
		wantUnavailable(t, "POST /v1/events to serve while the database is stopped", submit(t, serveURL, "app/web", 2))
		for _, u := range []string{apiURL, workerURL, serveURL} {
			wantNotReady(t, u, "database unreachable")
		}
		time.Sleep(3 * time.Second)
		alive("database stopped under running processes")
		c.start()
		for _, u := range []string{apiURL, workerURL, serveURL} {
			waitReady(t, u, 30*time.Second)
		}
		waitSucceeded(t, apiURL, eventID(t, submit(t, apiURL, "app/web", 3)), 30*time.Second)
		waitSucceeded(t, serveURL, eventID(t, submit(t, serveURL, "app/serve", 1)), 30*time.Second)
		alive("after the restart")
	})

	t.Run("crash and recovery", func(t *testing.T) {
		// Load while the server dies without a checkpoint and recovers.
		for i := 1; i <= 5; i++ {
			eventID(t, submit(t, apiURL, "app/crash", i))
		}
		c.crash()
		wantUnavailable(t, "POST /v1/events after a crash", submit(t, apiURL, "app/crash", 6))
		c.start()
		for _, u := range []string{apiURL, workerURL, serveURL} {
			waitReady(t, u, 30*time.Second)
		}
		testkit.Eventually(t, 30*time.Second, func() (bool, string) {
			a := call(t, apiURL, http.MethodGet, "/v1/resources/build/app/crash", nil)
			return a.Body["applied_version"] == float64(5), "resource app/crash: " + a.Raw
		})
		waitSucceeded(t, apiURL, eventID(t, submit(t, apiURL, "app/crash", 7)), 30*time.Second)
		alive("after a crash and recovery")
	})

	t.Run("read-only primary", func(t *testing.T) {
		c.exec(`ALTER SYSTEM SET default_transaction_read_only = on`)
		c.exec(`SELECT pg_reload_conf()`)
		testkit.Eventually(t, 10*time.Second, func() (bool, string) {
			a := call(t, apiURL, http.MethodGet, "/readyz", nil)
			return a.Status == http.StatusServiceUnavailable && a.Body["reason"] == "database read-only", "readyz: " + a.Raw
		})
		wantUnavailable(t, "POST /v1/events to a read-only primary", submit(t, apiURL, "app/web", 4))
		for _, u := range []string{workerURL, serveURL} {
			// Each process probes on its own pooled connections, and a
			// backend applies a reloaded setting only between queries: a
			// process may answer ready once more after another has seen
			// the change.
			testkit.Eventually(t, 5*time.Second, func() (bool, string) {
				a := call(t, u, http.MethodGet, "/readyz", nil)
				return a.Status == http.StatusServiceUnavailable && a.Body["reason"] == "database read-only", "readyz of " + u + ": " + a.Raw
			})
			wantNotReady(t, u, "database read-only")
		}
		time.Sleep(time.Second)
		alive("read-only primary")
		// The session must be writable for ALTER SYSTEM to pass.
		execURL(t, c.url(), `SET default_transaction_read_only = off`, `ALTER SYSTEM RESET default_transaction_read_only`, `SELECT pg_reload_conf()`)
		for _, u := range []string{apiURL, workerURL, serveURL} {
			waitReady(t, u, 30*time.Second)
		}
		waitSucceeded(t, apiURL, eventID(t, submit(t, apiURL, "app/web", 5)), 30*time.Second)
		alive("writable again")
	})
}

// readAll reads and closes resp's body.
func readAll(resp *http.Response) string {
	defer func() { _ = resp.Body.Close() }()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			return b.String()
		}
	}
}
