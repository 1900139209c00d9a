package store_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/store"
	"github.com/converge-run/converge/test/pgtest"
)

// autoExplain is what each connection of TestAcceptPlannedForItsTables
// runs: PostgreSQL's auto_explain module sends the plan of every statement
// to the session as a NOTICE.
const autoExplain = `LOAD 'auto_explain'; SET auto_explain.log_min_duration = 0;
	SET auto_explain.log_level = notice; SET auto_explain.log_nested_statements = on`

// TestAcceptPlannedForItsTables: the accept's batch statements are planned
// for the tables as they are, never with a generic plan PostgreSQL cached
// while the tables were small. Batches of 40 new streams on a new
// database, then 20,000 more streams, then one more batch: its statement
// that raises the streams' latest versions must find them through the
// primary key. Without plan_cache_mode = force_custom_plan around that
// statement (customPlanOn), PostgreSQL caches a hash join over a sequential scan of
// converge_streams after the fifth batch (costed for a table of a few
// pages) and keeps it however large the table grows, as long as nothing
// analyzes it (autovacuum off): the benchmark's accepts were 2–4 times
// slower in a third of its runs (docs/benchmarks.md).
func TestAcceptPlannedForItsTables(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := pgtest.NewDatabase(t)
	probe, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	_, loadErr := probe.Exec(ctx, autoExplain)
	_ = probe.Close(ctx)
	if loadErr != nil {
		if os.Getenv("TEST_REQUIRE_DB") == "1" {
			t.Fatalf("auto_explain (PostgreSQL's contrib modules): %v", loadErr)
		}
		t.Skipf("no auto_explain: %v", loadErr)
	}

	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1 // one connection: the one whose statement cache holds the plans
	var mu sync.Mutex
	var plans []string
	cfg.ConnConfig.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		mu.Lock()
		defer mu.Unlock()
		plans = append(plans, n.Message)
	}
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, autoExplain)
		return err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		t.Fatal(err)
	}
	st := store.New(pool, client)

	accept := func(prefix string) {
		t.Helper()
		ps := make([]store.EventAcceptParams, 40)
		for i := range ps {
			ps[i] = store.EventAcceptParams{MaxAttempts: 1, EventSubmission: converge.EventSubmission{
				Kind: "build", Resource: fmt.Sprintf("%s/%03d", prefix, i), Version: 1, Payload: []byte(`{}`)}}
		}
		_, errs, err := st.EventAcceptMany(ctx, ps)
		if err != nil {
			t.Fatal(err)
		}
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := range 8 {
		accept(fmt.Sprintf("small-%d", i))
	}
	if _, err := pool.Exec(ctx, `INSERT INTO converge_streams (kind, resource, latest_version)
		SELECT 'build', 'grown/' || g, 1 FROM generate_series(1, 20000) g`); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	plans = nil
	mu.Unlock()
	accept("large")

	mu.Lock()
	defer mu.Unlock()
	var raise string
	for _, p := range plans {
		if strings.Contains(p, "WITH raised AS") {
			raise = p
		}
	}
	if raise == "" {
		t.Fatalf("no plan of the accept's raise statement among the %d auto_explain notices", len(plans))
	}
	if strings.Contains(raise, "Seq Scan on converge_streams") || !strings.Contains(raise, "converge_streams_pkey") {
		t.Errorf("the raise statement walks converge_streams (20,000 rows) instead of its primary key:\n%s", raise)
	}
}
