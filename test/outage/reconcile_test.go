package outage

import (
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/converge-run/converge/test/cvproc"
	"github.com/converge-run/converge/test/testkit"
)

// recoveryBound is how soon after the database comes back from a crash a
// run whose River job was left running, with no worker on it, must
// succeed: the reconciler's quick pass after an outage, not its periodic
// pass (a minute with the default rescue_after of 2m). Set
// OUTAGE_RECOVERY_BOUND (a duration) to measure a build without the quick
// pass.
func recoveryBound(t *testing.T) time.Duration {
	if s := os.Getenv("OUTAGE_RECOVERY_BOUND"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("OUTAGE_RECOVERY_BOUND: %v", err)
		}
		return d
	}
	return 15 * time.Second
}

// TestCrashStrandedJob: with the default rescue_after (2m), a queued run
// whose River job is running with no worker on it (as when the worker
// fetched it and could not begin, or its snooze was lost, when the
// database crashed) succeeds within recoveryBound of the database coming
// back from a crash, because the worker's reconciler makes a quick pass
// once it sees the database again: the job was attempted before the
// outage began, so no worker could have recorded its end.
func TestCrashStrandedJob(t *testing.T) {
	c := newCluster(t)
	tg := newTarget(t)
	cfg := testkit.ConfigFile(t, config(c.url(), tg, "request_timeout: 3s\n"))
	migrate := cvproc.Start(t, cvproc.Options{Args: []string{"migrate", "up", "--config", cfg}, Env: cvproc.Env()})
	if code := migrate.Wait(t, 60*time.Second); code != 0 {
		t.Fatalf("migrate up: exit %d\n%s", code, migrate.Stderr())
	}

	// The API accepts the event while no worker runs; then its job is made
	// running in River, attempted 5 s ago by a worker that is gone.
	api, apiURL := proc(t, "api", "--config", cfg)
	waitReady(t, apiURL, 30*time.Second)
	stranded := eventID(t, submit(t, apiURL, "app/stranded", 1))
	var job int64
	queryURL(t, c.url(), `SELECT job_id FROM converge_runs WHERE event_id = $1 AND status = 'queued'`, []any{stranded}, &job)
	c.exec(fmt.Sprintf(`UPDATE river_job SET state = 'running', attempt = 1, attempted_by = ARRAY['gone-worker'],
		attempted_at = now() - interval '5 seconds' WHERE id = %d`, job))

	worker, workerURL := proc(t, "worker", "--config", cfg)
	waitReady(t, workerURL, 30*time.Second)
	// The worker works (another stream), and leaves the stranded run alone:
	// its job is running in River, and the reconciler takes it as stuck
	// only after four intervals (60 s).
	waitSucceeded(t, apiURL, eventID(t, submit(t, apiURL, "app/other", 1)), 30*time.Second)
	if a := call(t, apiURL, http.MethodGet, "/v1/events/"+stranded, nil); a.Body["status"] != "queued" {
		t.Fatalf("stranded event before the crash: %d %s, want queued", a.Status, a.Raw)
	}

	c.crash()
	time.Sleep(time.Second)
	c.start()
	back := time.Now()
	bound := recoveryBound(t)
	testkit.Eventually(t, bound, func() (bool, string) {
		a := call(t, apiURL, http.MethodGet, "/v1/events/"+stranded, nil)
		return a.Body["status"] == "succeeded", fmt.Sprintf("stranded event %s: %d %v", stranded, a.Status, a.Body["status"])
	})
	t.Logf("stranded run succeeded %s after the database came back", time.Since(back).Round(100*time.Millisecond))
	for _, p := range []*cvproc.Process{api, worker} {
		if !p.Running() {
			t.Fatalf("converge %s exited: %v\n%s", p.Name(), p.Err(), cvproc.LastLines(p.Stderr(), 20))
		}
	}
	if want := `"msg":"reconciled runs after a database outage","rescued":1,`; !containsLine(worker.Stderr(), want, `"outage_ms":`) {
		t.Errorf("worker's log has no line %s with the outage's length:\n%s", want, cvproc.LastLines(worker.Stderr(), 30))
	}
}

// queryURL scans the one row of sql (with args) on databaseURL into dest.
func queryURL(t *testing.T, databaseURL, sql string, args []any, dest ...any) {
	t.Helper()
	ctx, conn, done := connectURL(t, databaseURL)
	defer done()
	if err := conn.QueryRow(ctx, sql, args...).Scan(dest...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// containsLine reports whether a line of s contains every one of parts.
func containsLine(s string, parts ...string) bool {
	for line := range strings.Lines(s) {
		if !slices.ContainsFunc(parts, func(p string) bool { return !strings.Contains(line, p) }) {
			return true
		}
	}
	return false
}
