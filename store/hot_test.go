package store_test

import (
	"regexp"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/converge-run/converge/test/pgtest"
)

// unfinishedRunColumns are the columns of converge_runs that the updates of
// an unfinished run change (begin, retry, take back, reconcile): none of
// them may be used by an index, or those updates cannot be HOT (migration
// 000013). hold changes too when a held run is released, but that is rare
// and the held runs' index needs it.
var unfinishedRunColumns = []string{"status", "attempts", "started_at", "next_attempt_at", "job_id", "error"}

// TestRunIndexesLeaveUnfinishedUpdatesHOT checks that no index of
// converge_runs uses, as a key or in its predicate, a column that changes
// while a run is unfinished.
func TestRunIndexesLeaveUnfinishedUpdatesHOT(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	rows, err := pool.Query(t.Context(), `SELECT c.relname, pg_get_indexdef(i.indexrelid)
		FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
		WHERE i.indrelid = 'converge_runs'::regclass ORDER BY 1`)
	if err != nil {
		t.Fatalf("list indexes: %v", err)
	}
	defs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) ([2]string, error) {
		var d [2]string
		err := row.Scan(&d[0], &d[1])
		return d, err
	})
	if err != nil {
		t.Fatalf("list indexes: %v", err)
	}
	if len(defs) < 8 {
		t.Fatalf("converge_runs has %d indexes, want at least 8", len(defs))
	}
	for _, col := range unfinishedRunColumns {
		word := regexp.MustCompile(`(^|[^a-z_])` + col + `($|[^a-z_])`)
		for _, d := range defs {
			if word.MatchString(d[1]) {
				t.Errorf("index %s uses %s, which an unfinished run's updates change: %s", d[0], col, d[1])
			}
		}
	}
}

// TestRunUnfinishedUpdatesAreHOT makes a run go queued, running, retrying,
// running and succeeded in one transaction and reads the transaction's own
// HOT update count: the four updates of the unfinished run are HOT (the
// fresh page has room: fillfactor 50), the end is not (finished_at is
// indexed).
func TestRunUnfinishedUpdatesAreHOT(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.Pool(t)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var run string
	err = tx.QueryRow(ctx, `WITH e AS (
			INSERT INTO converge_events (id, kind, resource, version, payload)
			VALUES (converge_uuid_v7(), 'hot', 'r1', 1, '{}') RETURNING id)
		INSERT INTO converge_runs (id, event_id, number, kind, resource, version, status, max_attempts, job_id)
		SELECT converge_uuid_v7(), e.id, 1, 'hot', 'r1', 1, 'queued', 3, 1 FROM e RETURNING id::text`).Scan(&run)
	if err != nil {
		t.Fatalf("insert run: %v", err)
	}
	hot := func() (n, hotN int64) {
		t.Helper()
		err := tx.QueryRow(ctx, `SELECT pg_stat_get_xact_tuples_updated('converge_runs'::regclass),
			pg_stat_get_xact_tuples_hot_updated('converge_runs'::regclass)`).Scan(&n, &hotN)
		if err != nil {
			t.Fatalf("read counts: %v", err)
		}
		return n, hotN
	}
	steps := []struct {
		name, set string
		hot       bool
	}{
		{"queued to running", `status = 'running', attempts = 1, started_at = coalesce(started_at, now()), next_attempt_at = NULL`, true},
		{"running to retrying", `status = 'retrying', error = '{"class":"transient","message":"503"}', next_attempt_at = now() + interval '1 second'`, true},
		{"retrying to running", `status = 'running', attempts = 2, started_at = coalesce(started_at, now()), next_attempt_at = NULL`, true},
		{"reconcile a new job", `job_id = 2`, true},
		{"running to succeeded", `status = 'succeeded', finished_at = now(), output = '{}', error = NULL`, false},
	}
	for _, s := range steps {
		n0, h0 := hot()
		if _, err := tx.Exec(ctx, `UPDATE converge_runs SET `+s.set+` WHERE id = $1`, run); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		n1, h1 := hot()
		if n1 != n0+1 {
			t.Fatalf("%s: %d rows updated, want 1", s.name, n1-n0)
		}
		if got := h1 == h0+1; got != s.hot {
			t.Errorf("%s: HOT %v, want %v", s.name, got, s.hot)
		}
	}
}
