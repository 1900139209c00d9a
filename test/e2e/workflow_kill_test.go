package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/converge-run/converge/test/cvproc"
	"github.com/converge-run/converge/test/invariant"
	"github.com/converge-run/converge/test/pgtest"
	"github.com/converge-run/converge/test/testkit"
)

// TestWorkflowWorkerKilled SIGKILLs the worker process twice while a
// release workflow is mid-way: once while build's call is in flight, and
// once the moment staging's call has answered (so that the kill falls
// between a step's success and the acceptance of its successor, or just
// before the success is recorded). A new worker is started each time. The
// workflow run must end succeeded with each step's event accepted exactly
// once, and the invariant checker must find nothing.
func TestWorkflowWorkerKilled(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	pool := pgtest.OpenPool(t, db, 2)
	cvproc.Build(t)

	var mu sync.Mutex
	seen := map[string]int{} // calls per resource
	stagingAnswered := make(chan struct{}, 1)
	tgt := invariant.NewTarget(invariant.TargetConfig{
		Respond: func(ctx context.Context, c invariant.Call) int {
			mu.Lock()
			seen[c.Resource]++
			n := seen[c.Resource]
			mu.Unlock()
			switch {
			case c.Resource == "app/web" && n == 1:
				// build's first call hangs until its worker dies.
				<-ctx.Done()
				return 0
			case c.Resource == "staging/app/web" && n == 1:
				// staging's first call answers, and the test kills the
				// worker right away.
				stagingAnswered <- struct{}{}
			}
			return http.StatusOK
		},
	})
	srv := httptest.NewServer(tgt)
	t.Cleanup(srv.Close)

	cfg := testkit.ConfigFile(t, workflowConfig(db, srv.URL, "1s", releaseWorkflow))
	env := cvproc.Env("CONVERGE_ADMIN_TOKEN=" + adminToken)
	a := start(t, env, "api", "--config", cfg)
	c := client{base: a.URL(t, 30*time.Second), token: adminToken}
	cvproc.WaitHTTP(t, c.base+"/readyz", 30*time.Second)
	w1 := start(t, env, "worker", "--config", cfg)

	status, body := c.do(t, http.MethodPost, "/v1/workflow-runs", map[string]any{
		"workflow": "release", "resource": "app/web", "version": 1, "payload": map[string]any{"sha": "abc"},
	})
	if status != http.StatusAccepted {
		t.Fatalf("start: %d %v", status, body)
	}
	id := body["workflow_run"].(map[string]any)["id"].(string)

	inFlight := func(resource string) bool {
		for _, call := range tgt.InFlight() {
			if call.Resource == resource {
				return true
			}
		}
		return false
	}
	testkit.WaitFor(t, 30*time.Second, "build's call in flight", func() bool { return inFlight("app/web") })
	if err := w1.Kill(); err != nil {
		t.Fatal(err)
	}
	w2 := start(t, env, "worker", "--config", cfg)
	select {
	case <-stagingAnswered:
	case <-time.After(60 * time.Second):
		t.Fatal("staging was never called")
	}
	if err := w2.Kill(); err != nil {
		t.Fatal(err)
	}
	w3 := start(t, env, "worker", "--config", cfg)

	var wr map[string]any
	testkit.Eventually(t, 90*time.Second, func() (bool, string) {
		status, body := c.do(t, http.MethodGet, "/v1/workflow-runs/"+id, nil)
		if status != 200 {
			t.Fatalf("get workflow run: %d %v", status, body)
		}
		wr = body
		return body["finished_at"] != nil, fmt.Sprintf("workflow run is %v: %v", body["status"], body["steps"])
	})
	if wr["status"] != "succeeded" {
		t.Fatalf("workflow run ended %v: %v", wr["status"], wr["steps"])
	}
	for _, s := range wr["steps"].([]any) {
		if s := s.(map[string]any); s["status"] != "succeeded" {
			t.Errorf("step %v", s)
		}
	}

	// One event per step stream at version 1, each of this workflow run.
	for _, st := range []struct{ kind, resource string }{
		{"build", "app/web"}, {"deploy", "staging/app/web"}, {"deploy", "canary/app/web"}, {"deploy", "prod/app/web"},
	} {
		var n, mine int
		err := pool.QueryRow(t.Context(), `SELECT count(*), count(*) FILTER (WHERE workflow_run_id = $4)
			FROM converge_events WHERE kind = $1 AND resource = $2 AND version = $3`, st.kind, st.resource, 1, id).Scan(&n, &mine)
		if err != nil {
			t.Fatalf("count events: %v", err)
		}
		if n != 1 || mine != 1 {
			t.Errorf("%s %s@1: %d events (%d of the workflow run), want exactly 1", st.kind, st.resource, n, mine)
		}
	}
	var abandoned int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM converge_attempts WHERE outcome = 'abandoned'`).Scan(&abandoned); err != nil {
		t.Fatalf("count attempts: %v", err)
	}
	t.Logf("abandoned attempts: %d; calls per resource: %v", abandoned, seen)
	if abandoned < 1 {
		t.Errorf("no attempt was abandoned: the first kill hit nothing")
	}

	for _, p := range []*cvproc.Process{w3, a} {
		p.Signal(t, syscall.SIGTERM)
		if code := p.Wait(t, 30*time.Second); code != 0 {
			t.Errorf("%s exited %d after SIGTERM", p.Name(), code)
		}
	}
	rep, err := invariant.Check(t.Context(), pool, invariant.Params{Calls: tgt.Calls(), WorkflowsConverge: true})
	if err != nil {
		t.Fatalf("invariant check: %v", err)
	}
	t.Log(rep.Summary())
	for _, v := range rep.Violations {
		t.Errorf("violation: %s", v)
	}
	if rep.WorkflowRuns != 1 {
		t.Errorf("checker saw %d workflow runs, want 1", rep.WorkflowRuns)
	}
}
