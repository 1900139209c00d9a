package stress

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/converge-run/converge/test/invariant"
)

// releaseWorkflow is the stress cluster's workflow (SPEC §10): a build,
// then staging and canary side by side, then prod once both succeeded.
const releaseWorkflow = `  release:
    steps:
      build:   {kind: build}
      staging: {kind: deploy, resource: "staging/{resource}", needs: [build]}
      canary:  {kind: deploy, resource: "canary/{resource}", needs: [build]}
      prod:    {kind: deploy, resource: "prod/{resource}", needs: [staging, canary]}
`

// wfSize is how much a workflow stress run does.
type wfSize struct {
	resources int
	versions  int
	kills     int
	settle    time.Duration
}

func wfSizeOf(t *testing.T) wfSize {
	sz := sizeOf(t)
	scale := sz.streams / 50
	return wfSize{resources: 24 * scale, versions: 15, kills: sz.kills, settle: sz.settle}
}

// TestStressWorkflows starts hundreds of release workflow runs over dozens
// of resources with rising versions, faster than the pipeline goes, with
// a few direct events on the step streams, against a slow target that
// fails transiently; once everything has settled it checks every
// invariant, the workflow ones included (the last stage of every resource
// applied the highest version that passed all earlier stages).
func TestStressWorkflows(t *testing.T) { stressWorkflows(t, false) }

// TestStressWorkflowKills is TestStressWorkflows while the killer sends
// SIGKILL to a random worker at random moments and restarts it.
func TestStressWorkflowKills(t *testing.T) { stressWorkflows(t, true) }

// wfStart is one POST /v1/workflow-runs and its answer.
type wfStart struct {
	resource string
	version  int64
	status   int
	problem  string
	id       string
}

func stressWorkflows(t *testing.T, kills bool) {
	sz := wfSizeOf(t)
	tgt := invariant.NewTarget(invariant.TargetConfig{
		MinLatency: 5 * time.Millisecond, MaxLatency: 100 * time.Millisecond, TransientRate: 0.2,
	})
	kind := func(name string) kindConfig {
		return kindConfig{Name: name, MaxAttempts: 20, Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond,
			Concurrency: 8, Timeout: 10 * time.Second}
	}
	c := newCluster(t, tgt, clusterConfig{
		Kinds:       []kindConfig{kind("build"), kind("deploy")},
		RescueAfter: 2 * time.Second,
		Workflows:   releaseWorkflow,
	})
	c.pollOnly = map[string]bool{"w3": true}
	began := time.Now()
	c.start("api", "api")
	for i := 1; i <= 3; i++ {
		c.start("worker", fmt.Sprintf("w%d", i))
	}
	t.Logf("processes up in %s", time.Since(began).Round(time.Millisecond))
	ctx := t.Context()
	watch := invariant.WatchApplied(ctx, c.pool, 50*time.Millisecond)

	// Workflow runs at even versions 2..2n of every resource, nearly in
	// order (each moved by up to three places, so some arrive stale: 409).
	// Each stage holds a run back by the debounce (200ms) and the target
	// takes up to 100ms and fails one call in five, so versions arrive
	// faster than the pipeline runs and supersede each other stage by
	// stage. A few direct events at odd versions go to the step streams.
	type item struct {
		resource string
		version  int64
		order    float64
		direct   string // the step stream's resource for a direct event
	}
	var items []item
	for r := range sz.resources {
		res := fmt.Sprintf("app/svc-%02d", r)
		for v := 1; v <= sz.versions; v++ {
			items = append(items, item{resource: res, version: int64(2 * v), order: float64(v) + 3*rand.Float64()})
		}
		if r%3 == 0 {
			for i, stage := range []string{"staging", "canary", "prod"} {
				v := 2*(1+rand.N(sz.versions-1)) + 1 // odd, below the highest workflow version
				items = append(items, item{resource: res, version: int64(v), order: float64(v)/2 + float64(i)/10,
					direct: stage + "/" + res})
			}
		}
	}
	slices.SortFunc(items, func(a, b item) int { return cmp.Compare(a.order, b.order) })

	killer := c.startKiller(ctx, kills)
	defer killer.cancel()
	var pace time.Duration
	if kills {
		pace = time.Duration(sz.kills) * time.Second / time.Duration(len(items))
	} else {
		pace = 3 * time.Second / time.Duration(len(items))
	}

	start := time.Now()
	starts := make([]*wfStart, len(items))
	var directs []invariant.Submission
	var mu sync.Mutex
	runConcurrently(ctx, t, 12, pace, len(items), func(i int) error {
		it := items[i]
		if it.direct != "" {
			s, _, err := c.submit(ctx, "deploy", it.direct, it.version, map[string]any{"direct": it.version})
			if err != nil {
				return err
			}
			mu.Lock()
			directs = append(directs, s)
			mu.Unlock()
			return nil
		}
		s, err := c.startWorkflow(ctx, it.resource, it.version)
		starts[i] = s
		return err
	})
	submitted := time.Since(start)
	// Replays of a few accepted starts: 200 with the same workflow run.
	var accepted []*wfStart
	for _, s := range starts {
		if s != nil && s.status == http.StatusAccepted {
			accepted = append(accepted, s)
		}
	}
	for range 10 {
		s := accepted[rand.N(len(accepted))]
		r, err := c.startWorkflow(ctx, s.resource, s.version)
		if err != nil {
			t.Fatal(err)
		}
		if r.status != http.StatusOK || r.id != s.id {
			t.Errorf("replay of %s@%d (%s): answered %d %s with %q", s.resource, s.version, s.id, r.status, r.problem, r.id)
		}
	}

	if kills {
		killer.waitKills(t, sz.kills)
	}
	killer.stop(t)
	c.waitSettled(ctx, sz.settle, false)
	// Every step is accepted in the transaction of its last need's
	// success, so a settled cluster has no open workflow run.
	var open int
	if err := c.pool.QueryRow(ctx, `SELECT count(*) FROM converge_workflow_runs WHERE finished_at IS NULL`).Scan(&open); err != nil {
		t.Fatal(err)
	}
	if open > 0 {
		t.Errorf("%d workflow runs are still open with nothing left to run:\n%s", open, c.openWorkflowRuns(ctx))
	}
	converged := time.Since(start)
	c.stopAll()

	rep := c.check(ctx, invariant.Params{Applied: watch, WorkflowsConverge: true})

	answers := map[string]int{}
	for _, s := range starts {
		if s != nil {
			answers[fmt.Sprint(s.status, " ", s.problem)]++
		}
	}
	directAnswers := map[string]int{}
	for _, s := range directs {
		directAnswers[fmt.Sprint(s.Status, " ", s.Problem)]++
		if s.Status != http.StatusAccepted && s.Status != http.StatusConflict {
			t.Errorf("direct event deploy %s@%d: answered %d %s", s.Resource, s.Version, s.Status, s.Problem)
		}
	}
	for k := range answers {
		if k != "202 " && k != "409 stale-version" {
			t.Errorf("workflow run starts answered %v: want only 202 and 409 stale-version", answers)
			break
		}
	}
	byStatus := c.countBy(ctx, `SELECT status, count(*) FROM converge_workflow_runs GROUP BY 1`)
	steps := c.countBy(ctx, `SELECT name || ':' || state, count(*) FROM converge_workflow_steps GROUP BY 1`)
	// Deadlocks PostgreSQL broke (each finish or accept it aborted is run
	// again) and the log lines that still name one (an error that reached
	// a process: none expected).
	var deadlocks int64
	if err := c.pool.QueryRow(ctx, `SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()`).Scan(&deadlocks); err != nil {
		t.Fatal(err)
	}
	deadlockLines := 0
	for _, p := range c.allProcesses() {
		for line := range strings.Lines(p.Stderr()) {
			if strings.Contains(line, "deadlock") {
				// River's job completer runs a deadlocked batch again by
				// itself (it says so: "will retry"); only converge's own
				// transactions must never leave a deadlock to the rescuer.
				if strings.Contains(line, "jobcompleter") && strings.Contains(line, "will retry") {
					t.Logf("%s (River retries it): %s", p.Name(), strings.TrimSpace(line))
					continue
				}
				if deadlockLines < 3 {
					t.Logf("%s: %s", p.Name(), strings.TrimSpace(line))
				}
				deadlockLines++
			}
		}
	}
	if deadlockLines > 0 {
		t.Errorf("%d log lines name a deadlock: a deadlock's victim should have been run again", deadlockLines)
	}
	t.Logf("%d resources × %d versions: %d workflow runs answered %v; %d direct events on step streams answered %v; submitted in %s, converged in %s; kills %d",
		sz.resources, sz.versions, len(starts)-len(directs), answers, len(directs), directAnswers,
		submitted.Round(time.Millisecond), converged.Round(time.Millisecond), killer.count.Load())
	t.Logf("workflow runs by status %v; steps by state %v; events %d, calls %d, run supersessions %d, abandoned attempts %d; deadlocks broken by PostgreSQL %d",
		byStatus, steps, rep.Events, rep.Calls, rep.Supersessions, rep.AbandonedAttempts, deadlocks)

	for st := range byStatus {
		if st != "succeeded" && st != "superseded" {
			t.Errorf("workflow runs by status %v: want only succeeded and superseded (no permanent errors, no cancels)", byStatus)
			break
		}
	}
	if byStatus["superseded"] == 0 || byStatus["succeeded"] == 0 {
		t.Errorf("workflow runs by status %v: want some superseded and some succeeded, else the run proves less than it claims", byStatus)
	}
	if rep.WorkflowRuns != len(starts)-len(directs)-answers["409 stale-version"] {
		t.Errorf("checker saw %d workflow runs, %d were accepted", rep.WorkflowRuns, len(starts)-len(directs)-answers["409 stale-version"])
	}
	// No starvation: the newest workflow run of every resource went
	// through (every direct event is below it).
	var unfinishedNewest int
	if err := c.pool.QueryRow(ctx, `SELECT count(*) FROM converge_workflow_runs w
		WHERE version = (SELECT max(version) FROM converge_workflow_runs o WHERE o.workflow = w.workflow AND o.resource = w.resource)
		  AND status <> 'succeeded'`).Scan(&unfinishedNewest); err != nil {
		t.Fatal(err)
	}
	if unfinishedNewest > 0 {
		t.Errorf("%d resources' newest workflow run did not succeed", unfinishedNewest)
	}
}

// startWorkflow posts one start of the release workflow.
func (c *cluster) startWorkflow(ctx context.Context, resource string, version int64) (*wfStart, error) {
	var ans struct {
		WorkflowRun struct {
			ID string `json:"id"`
		} `json:"workflow_run"`
	}
	status, pr, err := c.do(ctx, http.MethodPost, "/v1/workflow-runs",
		map[string]any{"workflow": "release", "resource": resource, "version": version, "payload": map[string]any{"v": version}}, &ans)
	if err != nil {
		return nil, fmt.Errorf("start release %s@%d: %w", resource, version, err)
	}
	return &wfStart{resource: resource, version: version, status: status, problem: pr.slug(), id: ans.WorkflowRun.ID}, nil
}

// countBy runs a query of (text, count) rows into a map.
func (c *cluster) countBy(ctx context.Context, q string) map[string]int {
	c.t.Helper()
	rows, err := c.pool.Query(ctx, q)
	if err != nil {
		c.t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var k string
		var n int
		if err := rows.Scan(&k, &n); err != nil {
			c.t.Fatal(err)
		}
		out[k] = n
	}
	if err := rows.Err(); err != nil {
		c.t.Fatal(err)
	}
	return out
}

// openWorkflowRuns describes up to 20 workflow runs not final, for a
// failure message.
func (c *cluster) openWorkflowRuns(ctx context.Context) string {
	rows, err := c.pool.Query(ctx, `SELECT w.resource, w.version, w.status,
			string_agg(s.name || '=' || s.state, ' ' ORDER BY s.position)
		FROM converge_workflow_runs w JOIN converge_workflow_steps s ON s.workflow_run_id = w.id
		WHERE w.finished_at IS NULL GROUP BY w.id ORDER BY w.resource, w.version LIMIT 20`)
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var res, status, steps string
		var version int64
		if err := rows.Scan(&res, &version, &status, &steps); err != nil {
			return err.Error()
		}
		fmt.Fprintf(&b, "  %s@%d %s: %s\n", res, version, status, steps)
	}
	return b.String()
}
