package migrations_test

import (
	"net/url"
	"os"
	"testing"

	"github.com/golang-migrate/migrate/v4"
	"github.com/golang-migrate/migrate/v4/source/iofs"

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
	var total, shards int
	if err := pool.QueryRow(t.Context(), `SELECT coalesce(sum(n), 0), count(DISTINCT shard) FROM converge_run_counts`).Scan(&total, &shards); err != nil {
		t.Fatal(err)
	}
	if total != 2*4*3 || shards != 1 {
		t.Errorf("after 000014: %d terminal runs counted in %d shards, want 24 in 1", total, shards)
	}
	if d := drift(); d != 0 {
		t.Errorf("after 000014: the counts differ from the rows for %d (kind, status) pairs", d)
	}
	exec(`UPDATE converge_runs SET status = 'succeeded', finished_at = now() WHERE status = 'running'`)
	if d := drift(); d != 0 {
		t.Errorf("after runs ended: the counts differ from the rows for %d (kind, status) pairs", d)
	}
}
