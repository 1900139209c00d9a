package stress

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/converge-run/converge/test/invariant"
	"github.com/converge-run/converge/test/testkit"
)

// gatedWorkflow is a build, then a deploy that waits for approval.
const gatedWorkflow = `  release:
    steps:
      build:  {kind: build}
      deploy: {kind: deploy, resource: "prod/{resource}", needs: [build], approval: true}
`

// TestStressHeldKills is held work (SPEC §11) under the killer: workflow
// runs of rising versions whose deploy step waits for approval, and
// streams of a kind that quarantines after two failed runs, while an
// operator approves, rejects and releases at random and workers are
// killed with SIGKILL. Once settled, the checker holds every rule, and
// that a run that was held (still held, or superseded or rejected while
// held) has no attempt and never called its target.
func TestStressHeldKills(t *testing.T) {
	sz := sizeOf(t)
	tgt := invariant.NewTarget(invariant.TargetConfig{MinLatency: 5 * time.Millisecond, MaxLatency: 60 * time.Millisecond,
		Respond: func(_ context.Context, c invariant.Call) int {
			switch {
			case c.Kind == "flaky" && c.Version%3 != 0:
				return http.StatusBadRequest
			case rand.Float64() < 0.15:
				return http.StatusServiceUnavailable
			}
			return http.StatusOK
		}})
	kind := func(name string, maxAttempts, quarantineAfter int) kindConfig {
		return kindConfig{Name: name, MaxAttempts: maxAttempts, Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond,
			Concurrency: 8, Timeout: 10 * time.Second, QuarantineAfter: quarantineAfter}
	}
	c := newCluster(t, tgt, clusterConfig{
		Kinds:       []kindConfig{kind("build", 20, 0), kind("deploy", 20, 0), kind("flaky", 1, 2)},
		RescueAfter: 2 * time.Second,
		Workflows:   gatedWorkflow,
	})
	c.pollOnly = map[string]bool{"w3": true}
	c.start("api", "api")
	for i := 1; i <= 3; i++ {
		c.start("worker", fmt.Sprintf("w%d", i))
	}
	ctx := t.Context()
	watch := invariant.WatchApplied(ctx, c.pool, 50*time.Millisecond)

	var killCount atomic.Int64
	killerCtx, stopKiller := context.WithCancel(ctx)
	defer stopKiller()
	killerDone := make(chan error, 1)
	go func() { killerDone <- c.killer(killerCtx, &killCount) }()

	// The operator: approves two held deploys in three and rejects the
	// third, and releases quarantined streams, at random moments. Each
	// may race a supersession (409 not-held, run-finished or
	// not-quarantined: fine).
	var approved, rejected, released atomic.Int64
	opCtx, stopOperator := context.WithCancel(ctx)
	var opWG sync.WaitGroup
	opWG.Go(func() {
		for {
			select {
			case <-opCtx.Done():
				return
			case <-time.After(100*time.Millisecond + rand.N(300*time.Millisecond)):
			}
			var held []uuid.UUID
			rows, err := c.pool.Query(opCtx, `SELECT id FROM converge_runs WHERE status = 'held' AND 'approval' = ANY(hold) ORDER BY random() LIMIT 3`)
			if err == nil {
				for rows.Next() {
					var id uuid.UUID
					if rows.Scan(&id) == nil {
						held = append(held, id)
					}
				}
				rows.Close()
			}
			for _, id := range held {
				action, n := "approve", &approved
				if rand.N(3) == 0 {
					action, n = "reject", &rejected
				}
				if status, _, err := c.do(opCtx, http.MethodPost, "/v1/runs/"+id.String()+"/"+action, map[string]any{}, nil); err == nil && status == http.StatusOK {
					n.Add(1)
				}
			}
			var resource string
			if c.pool.QueryRow(opCtx, `SELECT resource FROM converge_streams WHERE kind = 'flaky' AND quarantined_at IS NOT NULL ORDER BY random() LIMIT 1`).Scan(&resource) == nil {
				if status, _, err := c.do(opCtx, http.MethodPost, "/v1/quarantine/flaky/"+resource+"/release", map[string]any{}, nil); err == nil && status == http.StatusOK {
					released.Add(1)
				}
			}
		}
	})

	// Workflow runs at rising versions (a few out of order: 409), and
	// events of the quarantining kind.
	const resources, versions = 12, 10
	var mu sync.Mutex
	answers := map[string]int{}
	runConcurrently(ctx, t, 8, time.Duration(sz.kills)*time.Second/(resources*versions*2), resources*versions*2, func(i int) error {
		r, v := (i/2)%resources, int64(i/(2*resources)+1)
		var status int
		var problem string
		if i%2 == 0 {
			s, err := c.startWorkflow(ctx, fmt.Sprintf("app/held-%02d", r), v)
			if err != nil {
				return err
			}
			status, problem = s.status, s.problem
		} else {
			s, _, err := c.submit(ctx, "flaky", fmt.Sprintf("svc/q-%02d", r), v, map[string]any{"n": v})
			if err != nil {
				return err
			}
			status, problem = s.Status, s.Problem
		}
		mu.Lock()
		answers[fmt.Sprint(status, " ", problem)]++
		mu.Unlock()
		return nil
	})
	testkit.WaitFor(t, 2*time.Minute, fmt.Sprintf("%d kills", sz.kills), func() bool { return killCount.Load() >= int64(sz.kills) })
	stopKiller()
	if err := <-killerDone; err != nil {
		t.Fatal(err)
	}
	stopOperator()
	opWG.Wait()
	c.waitSettled(ctx, sz.settle, true)
	c.stopAll()

	rep := c.check(ctx, invariant.Params{Applied: watch, AllowUnconverged: true, AllowHeld: true})
	held := c.countBy(ctx, `SELECT status || ':' || array_to_string(hold, ','), count(*) FROM converge_runs WHERE cardinality(hold) > 0 GROUP BY 1`)
	t.Logf("answers %v; kills %d; approved %d, rejected %d, released %d; runs that were held, by status and hold: %v; %s",
		answers, killCount.Load(), approved.Load(), rejected.Load(), released.Load(), held, rep.Summary())
	for k := range answers {
		if k != "202 " && k != "409 stale-version" {
			t.Errorf("answers %v: want only 202 and 409 stale-version", answers)
			break
		}
	}
	if approved.Load() == 0 || held["held:approval"]+held["superseded:approval"]+held["cancelled:approval"] == 0 {
		t.Errorf("approved %d, held runs %v: the run proves less than it claims", approved.Load(), held)
	}
	if released.Load() == 0 && held["held:quarantine"]+held["superseded:quarantine"] == 0 {
		t.Errorf("no stream was quarantined (released %d, held %v)", released.Load(), held)
	}
}
