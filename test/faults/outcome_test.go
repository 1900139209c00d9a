package faults

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/converge-run/converge/test/invariant"
)

// TestOutcomeWriteSurvivesOutage: when the outcome of a successful call
// cannot be written (the database crashed, or the worker's connections
// were terminated, right after the target answered 200), the worker
// retries the fenced write until the database is back, well within
// rescue_after: the target sees exactly one call and the run ends
// succeeded (SPEC §15, outcome writes; issue 20 item 5).
func TestOutcomeWriteSurvivesOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and converge processes; skipped with -short")
	}
	pg := startPG(t)
	var mu sync.Mutex
	// fault, when set, runs in the target's handler for the next call
	// before it answers 200; the call that ran it is sent on done.
	var fault func()
	done := make(chan invariant.Call, 1)
	tgt := invariant.NewTarget(invariant.TargetConfig{Respond: func(ctx context.Context, c invariant.Call) int {
		mu.Lock()
		f := fault
		fault = nil
		mu.Unlock()
		if f != nil {
			f()
			done <- c
		}
		return http.StatusOK
	}})
	st := newStack(t, pg, tgt, stackConfig{RescueAfter: 20 * time.Second})
	st.mustStart("api", "api")
	st.mustStart("worker", "w1")
	ctx := t.Context()

	cases := []struct {
		name  string
		fault func()
		// after runs once the call has been answered.
		after func()
	}{
		{"database crash for 3s", func() {
			if err := pg.StopImmediate(context.Background()); err != nil {
				t.Error(err)
			}
		}, func() {
			time.Sleep(3 * time.Second)
			if err := pg.Start(context.Background()); err != nil {
				t.Error(err)
			}
		}},
		{"pg_ctl restart -m immediate", func() {
			if err := pg.RestartImmediate(context.Background()); err != nil {
				t.Error(err)
			}
		}, func() {}},
		{"connections terminated", func() {
			if _, err := pg.TerminateBackends(context.Background()); err != nil {
				t.Error(err)
			}
		}, func() {}},
	}
	for i, tc := range cases {
		resource := fmt.Sprintf("outcome/%d", i)
		mu.Lock()
		fault = tc.fault
		mu.Unlock()
		if _, err := st.submitUntilAccepted(ctx, "build", resource, 1, map[string]any{}); err != nil {
			t.Fatalf("%s: submit: %v", tc.name, err)
		}
		var call invariant.Call
		select {
		case call = <-done:
		case <-time.After(60 * time.Second):
			t.Fatalf("%s: the target was not called", tc.name)
		}
		tc.after()
		if err := pg.WaitUp(ctx, time.Minute); err != nil {
			t.Fatal(err)
		}
		// The run ends succeeded well before rescue_after (20s) could
		// rescue it.
		deadline := time.Now().Add(15 * time.Second)
		var status string
		for time.Now().Before(deadline) {
			if err := pg.pool.QueryRow(ctx, `SELECT status FROM converge_runs WHERE id = $1`, call.RunID).Scan(&status); err == nil && status == "succeeded" {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if status != "succeeded" {
			t.Fatalf("%s: run %s is %q 15s after the database came back, want succeeded", tc.name, call.RunID, status)
		}
		var attempts int
		var outcome string
		if err := pg.pool.QueryRow(ctx, `SELECT r.attempts, a.outcome FROM converge_runs r JOIN converge_attempts a ON a.run_id = r.id
			WHERE r.id = $1 ORDER BY a.number DESC LIMIT 1`, call.RunID).Scan(&attempts, &outcome); err != nil {
			t.Fatal(err)
		}
		if attempts != 1 || outcome != "succeeded" {
			t.Errorf("%s: %d attempts, last %s; want 1 succeeded", tc.name, attempts, outcome)
		}
		n := 0
		for _, c := range tgt.Calls() {
			if c.Resource == resource {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%s: the target saw %d calls, want exactly 1", tc.name, n)
		}
		t.Logf("%s: run %s succeeded with one call", tc.name, call.RunID)
	}
	// The first case's write failed and was retried (the worker says so).
	if log := st.proc("w1").Stderr(); !strings.Contains(log, "attempt outcome recorded after retries") {
		t.Errorf("the worker never logged a retried outcome write:\n%s", log)
	}
	if ex := st.reap(); len(ex) > 0 {
		t.Logf("processes that exited by themselves (the other branch's start-up retry, issue 20 item 1): %v", st.Exits())
	}
}
