package stress

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/test/cvproc"
	"github.com/converge-run/converge/test/invariant"
	"github.com/converge-run/converge/test/testkit"
)

// TestStressPruneKills is TestStressKills with a retention of a second:
// the workers' periodic pruning job runs every second and `converge prune`
// every second or two beside it, while a killer sends SIGKILL to workers (a
// pass may die with its lease held; the next one waits for it to expire).
// Afterwards every deletion is judged against SPEC §13
// (invariant.CheckPruned: never a stream's latest or applied event, an
// unfinished run, an open dead letter, an unfinished workflow run; only
// rows old enough), the pruned rows are put back, and the checker holds
// G1–G8 over the whole history.
func TestStressPruneKills(t *testing.T) {
	sz := sizeOf(t)
	tgt := invariant.NewTarget(invariant.TargetConfig{
		MinLatency: 5 * time.Millisecond, MaxLatency: 100 * time.Millisecond, TransientRate: 0.2,
	})
	retention := converge.Retention{Runs: time.Second, DeadLetters: time.Second, WorkflowRuns: time.Second}
	c := newCluster(t, tgt, clusterConfig{
		Kinds: []kindConfig{{Name: "build", MaxAttempts: 20, Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond,
			Concurrency: 8, Timeout: 10 * time.Second}},
		RescueAfter: 2 * time.Second,
		Extra:       "retention: {runs: 1s, dead_letters: 1s, workflow_runs: 1s, interval: 1s}\n",
	})
	ctx := t.Context()
	if err := invariant.RecordPrunes(ctx, c.pool); err != nil {
		t.Fatal(err)
	}
	c.pollOnly = map[string]bool{"w2": true, "w3": true}
	c.start("api", "api")
	for i := 1; i <= 3; i++ {
		c.start("worker", fmt.Sprintf("w%d", i))
	}
	watch := invariant.WatchApplied(ctx, c.pool, 50*time.Millisecond)

	// `converge prune` in a loop, as an operator's cron would.
	bin := cvproc.Build(t)
	pruneCfg, err := c.writeConfig("pruner")
	if err != nil {
		t.Fatal(err)
	}
	var passes, busy atomic.Int64
	prunerCtx, stopPruner := context.WithCancel(ctx)
	defer stopPruner()
	var prunerErr error
	var wg sync.WaitGroup
	prune := func(ctx context.Context) (bool, error) {
		cmd := exec.CommandContext(ctx, bin, "prune", "--json", "--config", pruneCfg)
		cmd.Env = cvproc.Env()
		out, err := cmd.CombinedOutput()
		switch {
		case err == nil:
			passes.Add(1)
			return true, nil
		case strings.Contains(string(out), "another pruning pass"):
			busy.Add(1)
			return false, nil
		case ctx.Err() != nil:
			return false, nil
		}
		return false, fmt.Errorf("converge prune: %v\n%s", err, out)
	}
	wg.Go(func() {
		for prunerCtx.Err() == nil {
			if _, err := prune(prunerCtx); err != nil {
				prunerErr = err
				return
			}
			select {
			case <-prunerCtx.Done():
			case <-time.After(time.Second + rand.N(time.Second)):
			}
		}
	})

	keys := shuffledVersions(sz)
	killer := c.startKiller(ctx, true)
	defer killer.cancel()
	pace := time.Duration(sz.kills) * time.Second / time.Duration(len(keys))
	start := time.Now()
	subs := submitAll(ctx, t, c, 16, pace, len(keys), func(i int) (string, int64, any) {
		k := keys[i]
		return k.resource, k.version, map[string]any{"n": k.version}
	})
	killer.waitKills(t, sz.kills)
	killer.stop(t)
	c.waitSettled(ctx, sz.settle, false)
	stopPruner()
	wg.Wait()
	if prunerErr != nil {
		t.Fatal(prunerErr)
	}
	// The periodic job alone then prunes down to each stream's latest event
	// (the rows must age a second first, River must have a leader again,
	// and a killed worker's pass may hold the lease until it expires);
	// then one more `converge prune` must run (and find little).
	testkit.Eventually(t, 3*time.Minute, func() (bool, string) {
		var events int
		if err := c.pool.QueryRow(ctx, `SELECT count(*) FROM converge_events`).Scan(&events); err != nil {
			t.Fatal(err)
		}
		return events == sz.streams, fmt.Sprintf("%d events left, want the %d streams' latest", events, sz.streams)
	})
	testkit.Eventually(t, 2*time.Minute, func() (bool, string) {
		ok, err := prune(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return ok, "converge prune found the lease held"
	})
	c.stopAll()
	byTrigger := map[string]int{}
	rows, err := c.pool.Query(ctx, `SELECT coalesce(detail->>'trigger', ''), count(*) FROM converge_audit
		WHERE action = 'retention.prune' AND actor = 'system' GROUP BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var trigger string
		var n int
		if err := rows.Scan(&trigger, &n); err != nil {
			t.Fatal(err)
		}
		byTrigger[trigger] = n
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	t.Logf("passes that deleted rows, by trigger: %v", byTrigger)
	if byTrigger["job"] == 0 || byTrigger["cli"] == 0 {
		t.Errorf("passes that deleted rows by trigger = %v: want both the periodic job's and converge prune's", byTrigger)
	}

	prep, err := invariant.CheckPruned(ctx, c.pool, retention)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("pruned %v in %d transactions; converge prune passes %d (%d found the lease held); kills %d; in %s",
		prep.Pruned, prep.Transactions, passes.Load(), busy.Load(), killer.count.Load(), time.Since(start).Round(time.Millisecond))
	for _, v := range prep.Violations {
		t.Errorf("violation: %s", v)
	}
	if prep.Pruned["converge_events"] < sz.streams {
		t.Errorf("pruned %d events, want at least one per stream (%d): the passes pruned too little to test anything", prep.Pruned["converge_events"], sz.streams)
	}
	c.check(ctx, invariant.Params{Submissions: subs, Applied: watch})
}
