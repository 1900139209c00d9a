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
// Then the periodic job alone, and converge prune alone (the workers
// stopped), each prune fresh rows, so that both kinds of pass are seen to
// delete whatever the killer did to the lease. Afterwards every deletion is judged against SPEC §13
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
	submitted := time.Since(start)
	killer.waitKills(t, sz.kills)
	killer.stop(t)
	killed := time.Since(start)
	c.waitSettled(ctx, sz.settle, false)
	settled := time.Since(start)
	stopPruner()
	wg.Wait()
	if prunerErr != nil {
		t.Fatal(prunerErr)
	}
	stopped := time.Since(start)
	events := func() int {
		var n int
		if err := c.pool.QueryRow(ctx, `SELECT count(*) FROM converge_events`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	left := events()
	t.Logf("submitted at %s, killer stopped at %s, settled at %s, converge prune stopped at %s with %d events left (%d streams)",
		submitted.Round(time.Millisecond), killed.Round(time.Millisecond), settled.Round(time.Millisecond), stopped.Round(time.Millisecond), left, sz.streams)

	// Then each kind of pass prunes rows of its own, alone: while the
	// killer ran, either may have found nothing to delete, since a pass
	// killed with its worker holds the lease until it expires
	// (store.DefaultPruneLeaseTTL, a minute: longer than the run may last),
	// and the other kind may then have pruned all there was.
	version := int64(2 * sz.versions)
	more := func(n int) {
		t.Helper()
		for range n {
			version++
			v := version
			subs = append(subs, submitAll(ctx, t, c, 16, 0, sz.streams, func(i int) (string, int64, any) {
				return streamResource(i), v, map[string]any{"n": v}
			})...)
		}
	}
	// The periodic job, converge prune stopped: one more version of every
	// stream; once it is applied, the previous one's event is old. The job
	// prunes down to each stream's latest event (the rows must age a second
	// first, River must have a leader again, and a killed pass may hold the
	// lease until it expires), and its pass writes its audit entry.
	jobPhase := time.Now()
	more(1)
	c.waitSettled(ctx, sz.settle, false)
	testkit.Eventually(t, 3*time.Minute, func() (bool, string) {
		n := events()
		if n != sz.streams {
			return false, fmt.Sprintf("%d events left, want the %d streams' latest", n, sz.streams)
		}
		var audited bool
		if err := c.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM converge_audit WHERE action = 'retention.prune'
			AND actor = 'system' AND detail->>'trigger' = 'job' AND at >= $1)`, jobPhase).Scan(&audited); err != nil {
			t.Fatal(err)
		}
		return audited, "the periodic job's pass has pruned but written no audit entry yet"
	})
	jobPruned := time.Since(start)
	// converge prune, the workers stopped: two more versions of every
	// stream, the first superseded by the second while queued; its event is
	// neither the latest nor the applied one, and only converge prune is
	// left to prune it.
	for _, w := range c.liveWorkers() {
		w.Stop()
	}
	more(2)
	testkit.Eventually(t, 2*time.Minute, func() (bool, string) {
		ok, err := prune(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return false, "converge prune found the lease held"
		}
		n := events()
		return n == 2*sz.streams, fmt.Sprintf("%d events left after converge prune, want the %d streams' applied and latest", n, sz.streams)
	})
	cliPruned := time.Since(start)
	// The workers again, to apply the latest versions.
	for i := 1; i <= 3; i++ {
		c.start("worker", fmt.Sprintf("w%d", i))
	}
	c.waitSettled(ctx, sz.settle, false)
	t.Logf("the periodic job pruned alone down to the streams' latest events at %s, converge prune alone at %s; settled again at %s",
		jobPruned.Round(time.Millisecond), cliPruned.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	c.stopAll()
	byTrigger := map[string]int{}
	var passLog strings.Builder
	rows, err := c.pool.Query(ctx, `SELECT coalesce(detail->>'trigger', ''), at, coalesce((detail->'deleted'->>'events')::bigint, 0)
		FROM converge_audit WHERE action = 'retention.prune' AND actor = 'system' ORDER BY at`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var trigger string
		var at time.Time
		var events int64
		if err := rows.Scan(&trigger, &at, &events); err != nil {
			t.Fatal(err)
		}
		byTrigger[trigger]++
		fmt.Fprintf(&passLog, " %s@%s(%d events)", trigger, at.Sub(start).Round(time.Millisecond), events)
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	t.Logf("passes that deleted rows, by trigger: %v; in order:%s", byTrigger, passLog.String())
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
