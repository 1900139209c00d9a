package faults

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/converge-run/converge/test/invariant"
)

const heldKinds = `  build:
    target:
      http: {url: "%[1]s/build/%[2]s", timeout: 20s}
    backoff: {initial: 20ms, max: 200ms}
    debounce: 0s
  deploy:
    target:
      http: {url: "%[1]s/deploy/%[2]s", timeout: 20s}
    backoff: {initial: 20ms, max: 200ms}
    debounce: 0s
  flaky:
    target:
      http: {url: "%[1]s/flaky/%[2]s", timeout: 20s}
    max_attempts: 1
    quarantine_after: 2
    debounce: 0s
`

const heldWorkflows = `  release:
    steps:
      build:  {kind: build}
      deploy: {kind: deploy, resource: "prod/{resource}", needs: [build], approval: true}
`

// TestHeldRunsSurviveKills: runs held for approval (a workflow step with
// approval: true) and for quarantine (quarantine_after) stay held, with
// their holds, through kill -9 of every process and an immediate restart
// of PostgreSQL; no target call is made while they are held; approve,
// reject and release work afterwards and start exactly the runs they
// name (SPEC §11; issue 16).
func TestHeldRunsSurviveKills(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and converge processes; skipped with -short")
	}
	pg := startPG(t)
	tgt := invariant.NewTarget(invariant.TargetConfig{Respond: func(_ context.Context, c invariant.Call) int {
		if c.Kind == "flaky" && c.Version <= 2 {
			return http.StatusBadRequest
		}
		return http.StatusOK
	}})
	st := newStack(t, pg, tgt, stackConfig{RescueAfter: 3 * time.Second, Kinds: heldKinds, Workflows: heldWorkflows})
	procs := []struct{ mode, name string }{{"api", "api"}, {"worker", "w1"}, {"worker", "w2"}}
	for _, p := range procs {
		st.mustStart(p.mode, p.name)
	}
	ctx := t.Context()
	post := func(path string, body any, want int) []byte {
		t.Helper()
		var a *answer
		err := retry(func() error {
			var err error
			a, err = st.do(ctx, http.MethodPost, path, body)
			if err == nil && a.status >= 500 {
				err = fmt.Errorf("answered %d: %s", a.status, a.body)
			}
			return err
		})
		if err != nil || a.status != want {
			t.Fatalf("POST %s: %v %v, want %d", path, err, a, want)
		}
		return a.body
	}
	runStatus := func(id string) (status, hold string) {
		t.Helper()
		if err := pg.pool.QueryRow(ctx, `SELECT status, array_to_string(hold, ',') FROM converge_runs WHERE id = $1`, id).Scan(&status, &hold); err != nil {
			t.Fatal(err)
		}
		return status, hold
	}
	waitStatus := func(id, want string) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			if s, _ := runStatus(id); s == want {
				return
			}
			if time.Now().After(deadline) {
				s, h := runStatus(id)
				t.Fatalf("run %s is %s (hold %s), want %s", id, s, h, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	latestRun := func(kind, resource string) string {
		t.Helper()
		var id string
		deadline := time.Now().Add(60 * time.Second)
		for {
			err := pg.pool.QueryRow(ctx, `SELECT id::text FROM converge_runs WHERE kind = $1 AND resource = $2
				ORDER BY version DESC, number DESC LIMIT 1`, kind, resource).Scan(&id)
			if err == nil {
				return id
			}
			if time.Now().After(deadline) {
				t.Fatalf("no run of %s %s: %v", kind, resource, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	callsOf := func(id string) int {
		n := 0
		for _, c := range append(tgt.Calls(), tgt.InFlight()...) {
			if c.RunID.String() == id {
				n++
			}
		}
		return n
	}

	// Three workflow runs whose deploy step waits for approval.
	var deploys []string
	for i := range 3 {
		post("/v1/workflow-runs", map[string]any{"workflow": "release", "resource": fmt.Sprintf("app-%d", i), "version": 1, "payload": map[string]any{}}, http.StatusAccepted)
	}
	for i := range 3 {
		id := latestRun("deploy", fmt.Sprintf("prod/app-%d", i))
		waitStatus(id, "held")
		deploys = append(deploys, id)
	}
	// A stream quarantined after two failed runs; its third version is
	// held.
	for v := 1; v <= 2; v++ {
		post("/v1/events", map[string]any{"kind": "flaky", "resource": "svc", "version": v, "payload": map[string]any{}}, http.StatusAccepted)
		waitStatus(latestRun("flaky", "svc"), "failed")
	}
	post("/v1/events", map[string]any{"kind": "flaky", "resource": "svc", "version": 3, "payload": map[string]any{}}, http.StatusAccepted)
	quarantined := latestRun("flaky", "svc")
	waitStatus(quarantined, "held")
	held := append(slices.Clone(deploys), quarantined)
	holds := map[string]string{}
	for _, id := range held {
		_, holds[id] = runStatus(id)
	}
	if holds[quarantined] != "quarantine" || holds[deploys[0]] != "approval" {
		t.Fatalf("holds %v", holds)
	}

	killAll := func() {
		t.Helper()
		for _, p := range procs {
			if err := st.kill(p.name); err != nil {
				t.Fatal(err)
			}
		}
		if err := pg.RestartImmediate(context.Background()); err != nil {
			t.Fatal(err)
		}
		for _, p := range procs {
			st.mustStart(p.mode, p.name)
		}
		// Time for a worker that would wrongly start a held run to do so.
		time.Sleep(2 * time.Second)
	}
	stillHeld := func(ids ...string) {
		t.Helper()
		for _, id := range ids {
			if s, h := runStatus(id); s != "held" || h != holds[id] {
				t.Errorf("run %s is %s (hold %q) after kill -9 of every process, want held (%s)", id, s, h, holds[id])
			}
			if n := callsOf(id); n != 0 {
				t.Errorf("held run %s: %d target calls", id, n)
			}
		}
	}
	killAll()
	stillHeld(held...)

	// Approve, reject and release after the kills.
	post("/v1/runs/"+deploys[0]+"/approve", map[string]any{"reason": "ship it"}, http.StatusOK)
	post("/v1/runs/"+deploys[1]+"/reject", map[string]any{"reason": "not today"}, http.StatusOK)
	body := post("/v1/quarantine/flaky/svc/release", map[string]any{}, http.StatusOK)
	if !strings.Contains(string(body), quarantined) {
		t.Errorf("release answered %s, want run %s", body, quarantined)
	}
	waitStatus(deploys[0], "succeeded")
	waitStatus(quarantined, "succeeded")
	waitStatus(deploys[1], "cancelled")
	for id, want := range map[string]int{deploys[0]: 1, quarantined: 1, deploys[1]: 0, deploys[2]: 0} {
		if n := callsOf(id); n != want {
			t.Errorf("run %s: %d target calls, want %d", id, n, want)
		}
	}
	stillHeld(deploys[2])

	// Once more: the last one stays held through the kills, then runs.
	killAll()
	stillHeld(deploys[2])
	post("/v1/runs/"+deploys[2]+"/approve", map[string]any{}, http.StatusOK)
	waitStatus(deploys[2], "succeeded")
	if n := callsOf(deploys[2]); n != 1 {
		t.Errorf("run %s: %d target calls after its approval, want 1", deploys[2], n)
	}
	if n := len(tgt.InFlight()); n > 0 {
		t.Errorf("%d calls in flight at the end", n)
	}

	rep, err := invariant.Check(ctx, pg.pool, invariant.Params{Calls: tgt.Calls(), AllowUnconverged: true, AllowHeld: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("checker: %s", rep.Summary())
	for _, v := range rep.Violations {
		t.Errorf("violation: %s", v)
	}
}
