package jobs_test

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/converge-run/converge/jobs"
)

// TestReconcilerCompactsRunCounts: the reconciler's loop compacts the run
// counts (store.RunCountsCompact) at its first tick: deltas of one pair
// that net to 12 become one row of 12, and those that net to 0 go.
func TestReconcilerCompactsRunCounts(t *testing.T) {
	t.Parallel()
	st, pool := newBatchStore(t)
	ctx := t.Context()
	if _, err := pool.Exec(ctx, `INSERT INTO converge_run_counts (kind, status, n)
		SELECT 'build', 'succeeded', 1 FROM generate_series(1, 12)
		UNION ALL SELECT 'deploy', 'failed', CASE WHEN i % 2 = 0 THEN 1 ELSE -1 END FROM generate_series(1, 30) i`); err != nil {
		t.Fatal(err)
	}
	r := jobs.NewReconciler(st.Store, 20*time.Millisecond, slog.New(slog.NewTextHandler(io.Discard, nil)))
	r.Start(ctx)
	defer r.Stop()
	var rows, sum int
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if err := pool.QueryRow(ctx, `SELECT count(*), coalesce(sum(n), 0) FROM converge_run_counts`).Scan(&rows, &sum); err != nil {
			t.Fatal(err)
		}
		if rows == 1 {
			break
		}
	}
	var kind string
	var n int
	if err := pool.QueryRow(ctx, `SELECT kind, n FROM converge_run_counts`).Scan(&kind, &n); err != nil || rows != 1 || kind != "build" || n != 12 {
		t.Fatalf("after the reconciler's first tick: %d count rows summing to %d (first: %s %d, %v), want one row, build 12", rows, sum, kind, n, err)
	}
}
