package dlq_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/test/cvproc"
	"github.com/converge-run/converge/test/pgtest"
	"github.com/converge-run/converge/test/testkit"
)

// startWorker starts `converge worker` with config against databaseURL.
func startWorker(t *testing.T, config, databaseURL, name string) *cvproc.Process {
	t.Helper()
	return cvproc.Start(t, cvproc.Options{
		Args: []string{"worker", "--config", config},
		Env:  cvproc.Env("DATABASE_URL="+databaseURL, "CONVERGE_ADMIN_TOKEN="),
		Name: name,
	})
}

// TestSIGKILLOnLastAttempt: a worker killed with SIGKILL during a run's last
// allowed attempt still produces exactly one dead letter (reason
// attempts_exhausted, the abandoned attempt in its errors) once another
// worker runs: its reconciler gives the run a new job after rescue_after,
// and that job records the attempt abandoned and fails the run.
func TestSIGKILLOnLastAttempt(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewDatabase(t)
	workerURL := dbURL + "&pool_max_conns=4"
	if !strings.Contains(dbURL, "?") {
		workerURL = dbURL + "?pool_max_conns=4"
	}

	// The target holds every call until its caller goes away.
	var calls atomic.Int32
	arrived := make(chan struct{}, 16)
	tgt := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Reading the body to its end lets the server notice the caller
		// going away (and cancel the request's context).
		_, _ = io.Copy(io.Discard, r.Body)
		calls.Add(1)
		arrived <- struct{}{}
		select {
		case <-r.Context().Done():
		case <-time.After(time.Minute):
		}
	}))
	t.Cleanup(tgt.Close)

	config := testkit.ConfigFile(t, fmt.Sprintf(`rescue_after: 1s
shutdown_timeout: 1s
log_level: debug
river: {fetch_cooldown: 10ms, fetch_poll_interval: 50ms}
kinds:
  build:
    target:
      http: {url: %s/build, timeout: 2m}
    max_attempts: 1
    backoff: {initial: 10ms, max: 100ms}
    concurrency: 2
`, tgt.URL))

	s := newStack(t, stackOptions{dbURL: dbURL})
	res := s.accept(t, "build", "app/killed", 1, 1)

	first := startWorker(t, config, workerURL, "worker 1")
	select {
	case <-arrived:
	case <-time.After(60 * time.Second):
		t.Fatal("the first worker never called the target")
	}
	run, err := s.store.RunGet(t.Context(), res.Run.ID)
	if err != nil {
		t.Fatal(err)
	}
	if run.Status != converge.RunRunning || run.Attempts != 1 || len(run.AttemptHistory) != 1 || run.AttemptHistory[0].Outcome != "" {
		t.Fatalf("before the kill: %+v", run)
	}
	if err := first.Kill(); err != nil {
		t.Fatal(err)
	}
	if n := s.count(t, `SELECT count(*) FROM converge_dead_letters`); n != 0 {
		t.Fatalf("%d dead letters before any worker noticed", n)
	}

	second := startWorker(t, config, workerURL, "worker 2")
	testkit.WaitFor(t, 60*time.Second, "the dead letter", func() bool {
		return s.count(t, `SELECT count(*) FROM converge_dead_letters WHERE run_id = $1`, res.Run.ID) == 1
	})
	// Give a wrong second dead letter, or a second call, time to appear:
	// this watches for 2s that nothing more happens, so it waits out the
	// whole window by design (there is nothing to poll for).
	watch := time.NewTicker(100 * time.Millisecond)
	defer watch.Stop()
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); <-watch.C {
		if s.count(t, `SELECT count(*) FROM converge_dead_letters WHERE event_id = $1`, res.Event.ID) != 1 {
			t.Fatal("more than one dead letter")
		}
	}

	d := s.deadLetterOf(t, res.Run.ID)
	if d.Reason != converge.ReasonAttemptsExhausted || d.Attempts != 1 || d.Status != converge.DeadLetterOpen || d.Version != 1 {
		t.Fatalf("dead letter %+v", d)
	}
	if len(d.Errors) != 1 || !strings.Contains(d.Errors[0].Message, "worker stopped") || d.Errors[0].Class != converge.ClassTransient {
		t.Fatalf("errors %+v, want the abandoned attempt", d.Errors)
	}
	if d.Error == nil || d.Error.Message != d.Errors[0].Message {
		t.Fatalf("error %+v", d.Error)
	}
	run, err = s.store.RunGet(t.Context(), res.Run.ID)
	if err != nil {
		t.Fatal(err)
	}
	if run.Status != converge.RunFailed || run.Attempts != 1 || len(run.AttemptHistory) != 1 || run.AttemptHistory[0].Outcome != converge.OutcomeAbandoned {
		t.Fatalf("after: %+v", run)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("the target was called %d times, want once (the last attempt was used)", n)
	}
	second.Signal(t, syscall.SIGTERM)
	if code := second.Wait(t, 30*time.Second); code != 0 {
		t.Fatalf("worker 2 exited %d after SIGTERM, want 0", code)
	}
}
