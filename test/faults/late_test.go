package faults

import (
	"context"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/converge-run/converge/test/invariant"
)

// TestLateFinishOfAbandonedAttempt: a worker paused (SIGSTOP) during a
// call for longer than rescue_after wakes up after the run was rescued, its
// attempt recorded abandoned and a second attempt succeeded on another
// worker. Its late finish is logged and counted as fenced
// (converge_attempts_fenced_total{kind}), never logged "attempt succeeded"
// (SPEC §15; issue 20 item 7).
func TestLateFinishOfAbandonedAttempt(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and converge processes; skipped with -short")
	}
	pg := startPG(t)
	tgt := invariant.NewTarget(invariant.TargetConfig{Respond: func(ctx context.Context, c invariant.Call) int {
		if c.Attempt == 1 {
			// Answered while the worker is paused: the answer waits in
			// its socket.
			select {
			case <-ctx.Done():
			case <-time.After(2 * time.Second):
			}
		}
		return http.StatusOK
	}})
	st := newStack(t, pg, tgt, stackConfig{RescueAfter: time.Second})
	st.mustStart("api", "api")
	st.mustStart("worker", "w1")
	ctx := t.Context()
	if _, err := st.submitUntilAccepted(ctx, "build", "late/1", 1, map[string]any{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !inFlight(tgt, "late/1") {
		if time.Now().After(deadline) {
			t.Fatal("never called")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := st.signal("w1", syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	paused := true
	defer func() {
		if paused {
			_ = st.signal("w1", syscall.SIGCONT)
		}
	}()
	st.mustStart("worker", "w2")
	var runID string
	var status string
	for deadline = time.Now().Add(60 * time.Second); status != "succeeded"; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the run was not rescued and succeeded by w2: %q", status)
		}
		_ = pg.pool.QueryRow(ctx, `SELECT id::text, status FROM converge_runs WHERE resource = 'late/1'`).Scan(&runID, &status)
	}
	// Past the target's answer to the paused call.
	time.Sleep(2500 * time.Millisecond)
	if err := st.signal("w1", syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	paused = false
	rec, err := st.proc("w1").WaitLog(15*time.Second, "late attempt outcome refused")
	if err != nil {
		t.Fatalf("w1 never logged its late finish as fenced: %v\n%s", err, st.proc("w1").Stderr())
	}
	if rec["run_id"] != runID || rec["attempt"] != float64(1) {
		t.Errorf("fenced record %v, want run %s attempt 1", rec, runID)
	}
	for _, r := range logRecords(st.proc("w1").Stderr()) {
		if r["msg"] == "attempt succeeded" && r["run_id"] == runID {
			t.Errorf("w1 logged %v for the attempt the database recorded abandoned", r)
		}
	}
	n, err := st.metric(ctx, "w1", "converge_attempts_fenced_total", `kind="build"`)
	if err != nil || n < 1 {
		t.Errorf("w1's converge_attempts_fenced_total{kind=\"build\"} = %v (%v), want at least 1", n, err)
	}
	var outcomes string
	if err := pg.pool.QueryRow(ctx, `SELECT string_agg(outcome, ',' ORDER BY number) FROM converge_attempts WHERE run_id = $1`, runID).Scan(&outcomes); err != nil {
		t.Fatal(err)
	}
	if outcomes != "abandoned,succeeded" {
		t.Errorf("attempts %s, want abandoned,succeeded", outcomes)
	}
	if !strings.Contains(st.proc("w2").Stderr(), "attempt succeeded") {
		t.Errorf("w2 did not log its success")
	}
}
