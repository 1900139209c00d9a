package invariant

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/store"
	"github.com/converge-run/converge/test/pgtest"
)

// TestCheckPruned: after a real pruning pass over the fixture's history
// (version 1 is old enough and neither latest nor applied), CheckPruned
// finds every deletion allowed and puts the rows back, and Check then
// holds every rule over the whole history; a deletion outside the rules
// (the stream's latest event, deleted on the prune path by hand) is
// reported.
func TestCheckPruned(t *testing.T) {
	t.Parallel()
	retention := converge.Retention{Runs: time.Minute, DeadLetters: time.Minute, WorkflowRuns: time.Minute}
	setup := func(t *testing.T) (*pgxpool.Pool, *fixture) {
		pool := pgtest.OpenPool(t, pgtest.NewDatabase(t), 2)
		f := newFixture()
		f.write(t, pool)
		if err := RecordPrunes(t.Context(), pool); err != nil {
			t.Fatal(err)
		}
		return pool, f
	}

	t.Run("a real pass", func(t *testing.T) {
		t.Parallel()
		pool, f := setup(t)
		res, err := store.New(pool, nil).Prune(t.Context(), store.PruneParams{Retention: retention})
		if err != nil {
			t.Fatal(err)
		}
		if res.Deleted["events"] != 1 || res.Deleted["runs"] != 1 || res.Deleted["attempts"] != 1 {
			t.Fatalf("prune deleted %v, want version 1's event, run and attempt", res.Deleted)
		}
		rep, err := CheckPruned(t.Context(), pool, retention)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range rep.Violations {
			t.Errorf("violation: %s", v)
		}
		if rep.Pruned["converge_events"] != 1 || rep.Pruned["converge_runs"] != 1 || rep.Pruned["converge_attempts"] != 1 || rep.Transactions != 1 {
			t.Errorf("recorded %v in %d transactions, want 1 event, run and attempt in 1", rep.Pruned, rep.Transactions)
		}
		full, err := Check(t.Context(), pool, Params{Calls: f.calls, Submissions: f.subs})
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range full.Violations {
			t.Errorf("violation over the restored history: %s", v)
		}
		if full.Events != 2 || full.Runs != 2 || full.Attempts != 3 {
			t.Errorf("restored history has %d events, %d runs, %d attempts; want 2, 2, 3", full.Events, full.Runs, full.Attempts)
		}
	})

	t.Run("the latest event deleted", func(t *testing.T) {
		t.Parallel()
		pool, f := setup(t)
		pruneByHand(t, pool, []any{f.events[1].id},
			`DELETE FROM converge_attempts WHERE run_id IN (SELECT id FROM converge_runs WHERE event_id = $1)`,
			`DELETE FROM converge_runs WHERE event_id = $1`, `DELETE FROM converge_events WHERE id = $1`)
		rep, err := CheckPruned(t.Context(), pool, retention)
		if err != nil {
			t.Fatal(err)
		}
		var latest, young bool
		for _, v := range rep.Violations {
			switch {
			case v.Rule == "P" && contains(v.Message, "no event: it was deleted"):
				latest = true
			case v.Rule == "P" && contains(v.Message, "latest accepted event"):
				young = true
			}
		}
		if !latest || !young {
			t.Fatalf("violations %v: want the missing latest event and its unallowed deletion reported", rep.Violations)
		}
	})
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// pruneByHand runs the deletes, each with args, in one transaction on the
// prune path (converge.pruning on), as a pass that broke the rules would.
func pruneByHand(t *testing.T, pool *pgxpool.Pool, args []any, deletes ...string) {
	t.Helper()
	tx, err := pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(t.Context())) }()
	if _, err := tx.Exec(t.Context(), `SELECT set_config('converge.pruning', 'on', true)`); err != nil {
		t.Fatal(err)
	}
	for _, sql := range deletes {
		if _, err := tx.Exec(t.Context(), sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	if err := tx.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// TestCheckPrunedWorkflowRuns: a final workflow run older than
// workflow_runs is pruned with its steps even while its step events are
// kept (each its stream's latest accepted and applied version: SPEC §13
// keeps an event a kept workflow run refers to, not the other way round);
// CheckPruned finds the deletion allowed, and Check holds over the
// restored history. An event deleted while its workflow run is kept is
// reported.
func TestCheckPrunedWorkflowRuns(t *testing.T) {
	t.Parallel()
	retention := converge.Retention{Runs: time.Minute, DeadLetters: time.Minute, WorkflowRuns: time.Minute}
	setup := func(t *testing.T) *pgxpool.Pool {
		pool := pgtest.OpenPool(t, pgtest.NewDatabase(t), 2)
		newWFFixture().write(t, func(sql string, args ...any) {
			t.Helper()
			if _, err := pool.Exec(t.Context(), sql, args...); err != nil {
				t.Fatalf("%s: %v", sql, err)
			}
		})
		if err := RecordPrunes(t.Context(), pool); err != nil {
			t.Fatal(err)
		}
		return pool
	}

	t.Run("a real pass", func(t *testing.T) {
		t.Parallel()
		pool := setup(t)
		res, err := store.New(pool, nil).Prune(t.Context(), store.PruneParams{Retention: retention})
		if err != nil {
			t.Fatal(err)
		}
		if res.Deleted["workflow_runs"] != 1 || res.Deleted["workflow_steps"] != 2 || res.Deleted["events"] != 0 {
			t.Fatalf("prune deleted %v, want the workflow run and its 2 steps, no event", res.Deleted)
		}
		var dangling int
		if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM converge_events WHERE workflow_run_id IS NOT NULL`).Scan(&dangling); err != nil || dangling != 2 {
			t.Fatalf("%d events keep their workflow run's id (%v), want 2", dangling, err)
		}
		rep, err := CheckPruned(t.Context(), pool, retention)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range rep.Violations {
			t.Errorf("violation: %s", v)
		}
		full, err := Check(t.Context(), pool, Params{AllowUnconverged: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range full.Violations {
			if v.Rule == "W" || v.Rule == "P" {
				t.Errorf("violation over the restored history: %s", v)
			}
		}
		if full.WorkflowRuns != 1 {
			t.Errorf("restored history has %d workflow runs, want 1", full.WorkflowRuns)
		}
	})

	t.Run("an event of a kept workflow run deleted", func(t *testing.T) {
		t.Parallel()
		pool := setup(t)
		pruneByHand(t, pool, nil, `DELETE FROM converge_workflow_steps WHERE name = 'build'`,
			`DELETE FROM converge_runs WHERE kind = 'build'`, `DELETE FROM converge_events WHERE kind = 'build'`)
		rep, err := CheckPruned(t.Context(), pool, retention)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, v := range rep.Violations {
			found = found || v.Rule == "P" && contains(v.Message, "a kept workflow run refers to it")
		}
		if !found {
			t.Fatalf("violations %v: want the event of a kept workflow run reported", rep.Violations)
		}
	})
}
