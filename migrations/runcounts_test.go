package migrations_test

import (
	"context"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/golang-migrate/migrate/v4"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5"

	"github.com/converge-run/converge/test/pgtest"
)

// TestRunCountsMigration takes a migrated database down to 000013, writes
// runs in every status there, and up again: 000014 counts the terminal runs
// that were there, and its triggers count those that come after.
func TestRunCountsMigration(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	src, err := iofs.New(os.DirFS("."), ".")
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(db)
	if err != nil {
		t.Fatal(err)
	}
	u.Scheme = "pgx5"
	q := u.Query()
	q.Set("x-migrations-table", "schema_migrations")
	u.RawQuery = q.Encode()
	m, err := migrate.NewWithSourceInstance("iofs", src, u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = m.Close() }()
	pool := pgtest.OpenPool(t, db, 2)
	exec := func(sql string) {
		t.Helper()
		if _, err := pool.Exec(t.Context(), sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	// drift is how many (kind, status) pairs the counts give another
	// number of terminal runs than the rows.
	drift := func() int {
		t.Helper()
		var n int
		if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM (
				SELECT kind, status, count(*) AS n FROM converge_runs WHERE finished_at IS NOT NULL GROUP BY kind, status) r
				FULL JOIN (SELECT kind, status, sum(n) AS n FROM converge_run_counts GROUP BY kind, status HAVING sum(n) <> 0) c
				USING (kind, status) WHERE r.n IS DISTINCT FROM c.n`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	if err := m.Migrate(13); err != nil {
		t.Fatalf("down to 13: %v", err)
	}
	var exists bool
	if err := pool.QueryRow(t.Context(), `SELECT to_regclass('converge_run_counts') IS NOT NULL`).Scan(&exists); err != nil || exists {
		t.Fatalf("converge_run_counts after the down migration: exists %v, %v", exists, err)
	}
	exec(`WITH ev AS (
			INSERT INTO converge_events (id, kind, resource, version, payload)
			SELECT gen_random_uuid(), k, 'app/' || s || '-' || i, 1, '{}'
			  FROM unnest(ARRAY['build', 'deploy']) k,
			       unnest(ARRAY['queued', 'running', 'succeeded', 'failed', 'superseded', 'cancelled']) s,
			       generate_series(1, 3) i
			RETURNING id, kind, resource, version)
		INSERT INTO converge_runs (id, event_id, number, kind, resource, version, status, max_attempts, finished_at)
		SELECT gen_random_uuid(), id, 1, kind, resource, version, split_part(split_part(resource, '/', 2), '-', 1), 3,
		       CASE WHEN split_part(split_part(resource, '/', 2), '-', 1) IN ('succeeded', 'failed', 'superseded', 'cancelled') THEN now() END
		  FROM ev`)

	if err := m.Migrate(14); err != nil {
		t.Fatalf("up to 14: %v", err)
	}
	var total, rows int
	if err := pool.QueryRow(t.Context(), `SELECT coalesce(sum(n), 0), count(*) FROM converge_run_counts`).Scan(&total, &rows); err != nil {
		t.Fatal(err)
	}
	if total != 2*4*3 || rows != 2*4 {
		t.Errorf("after 000014: %d terminal runs counted in %d rows, want 24 in 8 (one per kind and terminal status)", total, rows)
	}
	if d := drift(); d != 0 {
		t.Errorf("after 000014: the counts differ from the rows for %d (kind, status) pairs", d)
	}
	exec(`UPDATE converge_runs SET status = 'succeeded', finished_at = now() WHERE status = 'running'`)
	if d := drift(); d != 0 {
		t.Errorf("after runs ended: the counts differ from the rows for %d (kind, status) pairs", d)
	}
}

// TestRunCountsTakeNoLocks ends runs of two kinds in two transactions, in
// opposite orders (as two workflow cancels whose step runs come in
// opposite kind orders do), on two connections whose backends share
// pg_backend_pid() % 16 (the shard both wrote under the first design,
// whose upserts deadlocked here), and each ends a run of the (kind,
// status) the other has just ended, uncommitted: with lock_timeout 500ms
// on both, every statement must finish at once, since the count triggers
// only insert rows and wait for no lock of the other transaction. Both
// commit, and the counts are the rows.
func TestRunCountsTakeNoLocks(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	// Connections until two share a shard (at most 17).
	seen := map[int]*pgx.Conn{}
	var c1, c2 *pgx.Conn
	for c1 == nil {
		c, err := pgx.Connect(ctx, db)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close(context.WithoutCancel(ctx)) })
		var shard int
		if err := c.QueryRow(ctx, `SELECT pg_backend_pid() % 16`).Scan(&shard); err != nil {
			t.Fatal(err)
		}
		if o, ok := seen[shard]; ok {
			c1, c2 = o, c
		}
		seen[shard] = c
	}
	run := func(kind string) string {
		t.Helper()
		var id string
		if err := c1.QueryRow(ctx, `WITH e AS (
				INSERT INTO converge_events (id, kind, resource, version, payload)
				VALUES (gen_random_uuid(), $1, 'app/' || gen_random_uuid(), 1, '{}') RETURNING id, kind, resource)
			INSERT INTO converge_runs (id, event_id, number, kind, resource, version, status, max_attempts)
			SELECT id, id, 1, kind, resource, 1, 'queued', 3 FROM e RETURNING id::text`, kind).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	a1, b1, a2, b2 := run("build"), run("deploy"), run("build"), run("deploy")
	begin := func(c *pgx.Conn) pgx.Tx {
		t.Helper()
		tx, err := c.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '500ms'`); err != nil {
			t.Fatal(err)
		}
		return tx
	}
	t1, t2 := begin(c1), begin(c2)
	end := func(name string, tx pgx.Tx, id string) {
		t.Helper()
		start := time.Now()
		if _, err := tx.Exec(ctx, `UPDATE converge_runs SET status = 'cancelled', finished_at = now() WHERE id = $1`, id); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if d := time.Since(start); d > 400*time.Millisecond {
			t.Errorf("%s took %v: it waited for the other transaction", name, d)
		}
	}
	end("T1 ends a build run", t1, a1)
	end("T2 ends a deploy run", t2, b1)
	end("T1 ends a deploy run", t1, b2)
	end("T2 ends a build run", t2, a2)
	for i, tx := range []pgx.Tx{t1, t2} {
		if err := tx.Commit(ctx); err != nil {
			t.Fatalf("commit T%d: %v", i+1, err)
		}
	}
	rows, err := c1.Query(ctx, `SELECT kind, sum(n)::bigint FROM converge_run_counts WHERE status = 'cancelled' GROUP BY kind`)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	var kind string
	var n int64
	if _, err := pgx.ForEachRow(rows, []any{&kind, &n}, func() error { got[kind] = n; return nil }); err != nil {
		t.Fatal(err)
	}
	if got["build"] != 2 || got["deploy"] != 2 || len(got) != 2 {
		t.Errorf("cancelled runs counted: %v, want build 2 and deploy 2", got)
	}
}
