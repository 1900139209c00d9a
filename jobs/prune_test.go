package jobs_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/jobs"
	"github.com/converge-run/converge/store"
	"github.com/converge-run/converge/target"
	"github.com/converge-run/converge/telemetry"
	"github.com/converge-run/converge/test/pgtest"
	"github.com/converge-run/converge/test/testkit"
)

// TestPrunePeriodicJob runs a working service with a retention of a
// millisecond, pruned every second: the older of two finished events goes
// (the latest stays), converge_pruned_rows_total counts it, and one audit
// entry per pass that deleted anything is written.
func TestPrunePeriodicJob(t *testing.T) {
	t.Parallel()
	tgt := newFakeTarget(t, func(_ int, w http.ResponseWriter, _ *http.Request) { answer(w, 200, `{}`) })
	tg, err := target.NewHTTP(target.HTTPConfig{URL: tgt.srv.URL + "/build", Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]*jobs.Kind{"build": {KindPolicy: converge.KindPolicy{Name: "build", Timeout: 5 * time.Second, MaxAttempts: 3,
		Backoff: testBackoff, Concurrency: 2}, Target: tg}}
	pool := pgtest.OpenPool(t, pgtest.NewDatabase(t), 8)
	reg := prometheus.NewRegistry()
	metrics := telemetry.NewMetrics(reg, telemetry.Labels{Kinds: []string{"build"}})
	svc, err := jobs.NewService(pool, jobs.Config{
		Kinds: kinds, Work: true, RescueAfter: 2 * time.Second,
		FetchCooldown: 5 * time.Millisecond, FetchPollInterval: 20 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Metrics: metrics,
		Retention: converge.Retention{Runs: time.Millisecond, DeadLetters: time.Millisecond, WorkflowRuns: time.Millisecond, Interval: 200 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := svc.Stop(ctx); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	st := svc.Store()
	var ids [2]string
	for i := range 2 {
		res, err := st.EventAccept(t.Context(), store.EventAcceptParams{
			EventSubmission: converge.EventSubmission{Kind: "build", Resource: "app/p", Version: int64(i + 1), Payload: json.RawMessage(`{}`)},
			MaxAttempts:     3})
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = res.Event.ID.String()
		waitTerminal(t, st, res.Event.ID, 10*time.Second)
	}
	testkit.Eventually(t, 30*time.Second, func() (bool, string) {
		var n int
		if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM converge_events`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1, "events left: want the latest only"
	})
	var left string
	if err := pool.QueryRow(t.Context(), `SELECT id::text FROM converge_events`).Scan(&left); err != nil || left != ids[1] {
		t.Fatalf("event left = %s (%v), want the latest %s", left, err, ids[1])
	}
	testkit.Eventually(t, 10*time.Second, func() (bool, string) {
		return prunedRows(t, reg, "events") == 1 && prunedRows(t, reg, "runs") == 1 && prunedRows(t, reg, "attempts") == 1,
			"converge_pruned_rows_total{table=events|runs|attempts} want 1"
	})
	for _, table := range telemetry.PrunedTables {
		if n := prunedRows(t, reg, table); n != 0 && table != "events" && table != "runs" && table != "attempts" {
			t.Errorf("converge_pruned_rows_total{table=%q} = %v, want 0", table, n)
		}
	}
	if tables := prunedTables(t, reg); !slices.Equal(tables, slices.Sorted(slices.Values(telemetry.PrunedTables))) {
		t.Errorf("converge_pruned_rows_total tables = %v, want exactly %v", tables, telemetry.PrunedTables)
	}
	// The pass's audit entry is written once its batches are done (after
	// the counter moved).
	testkit.Eventually(t, 10*time.Second, func() (bool, string) {
		var audits int
		if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM converge_audit WHERE action = 'retention.prune' AND actor = 'system'
				AND detail->>'trigger' = 'job' AND (detail->'deleted'->>'events')::int = 1`).Scan(&audits); err != nil {
			t.Fatal(err)
		}
		return audits == 1, fmt.Sprintf("%d retention.prune audit entries of the job with 1 event, want 1", audits)
	})
}

// prunedRows reads converge_pruned_rows_total{table} from reg.
func prunedRows(t *testing.T, reg *prometheus.Registry, table string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "converge_pruned_rows_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "table" && l.GetValue() == table {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no converge_pruned_rows_total{table=%q}", table)
	return 0
}

// prunedTables lists the table labels of converge_pruned_rows_total, sorted.
func prunedTables(t *testing.T, reg *prometheus.Registry) []string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, mf := range mfs {
		if mf.GetName() == "converge_pruned_rows_total" {
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "table" {
						out = append(out, l.GetValue())
					}
				}
			}
		}
	}
	slices.Sort(out)
	return out
}
