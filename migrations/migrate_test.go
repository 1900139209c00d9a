package migrations_test

import (
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/converge-run/converge/migrations"
	"github.com/converge-run/converge/test/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func status(t *testing.T, databaseURL string) migrations.Status {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		t.Fatalf("parse url: %v", err)
	}
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatalf("open pool: %v", err)
	}
	defer pool.Close()
	st, err := migrations.StatusOf(t.Context(), pool)
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	return st
}

// TestUpConcurrent runs three migrations at once on an empty database (River's
// migrator takes no lock by itself), then down and up again.
func TestUpConcurrent(t *testing.T) {
	t.Parallel()
	db := pgtest.EmptyDatabase(t)
	if st := status(t, db); st.Current() || st.Version != 0 || st.RiverVersion != 0 {
		t.Fatalf("empty database reports %s", st.Description)
	}

	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range errs {
		wg.Go(func() { errs[i] = migrations.Up(t.Context(), db) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("migration %d: %v", i+1, err)
		}
	}
	st := status(t, db)
	if !st.Current() || st.Version != st.Latest || st.Latest == 0 || st.RiverVersion != st.RiverLatest {
		t.Fatalf("after three concurrent ups: %s (missing river %v)", st.Description, st.RiverMissing)
	}

	// Up again changes nothing.
	if err := migrations.Up(t.Context(), db); err != nil {
		t.Fatalf("up on a current schema: %v", err)
	}

	if err := migrations.Down(t.Context(), db); err != nil {
		t.Fatalf("down: %v", err)
	}
	st = status(t, db)
	if st.Current() || st.Version != 0 || st.RiverVersion != 0 {
		t.Fatalf("after down: %s", st.Description)
	}
	var tables int
	conn, err := pgxpool.New(t.Context(), db)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close()
	if err := conn.QueryRow(t.Context(), `SELECT count(*) FROM pg_tables WHERE schemaname = 'public'
		AND (tablename LIKE 'converge\_%' OR tablename LIKE 'river\_%')`).Scan(&tables); err != nil {
		t.Fatalf("count tables: %v", err)
	}
	if tables != 0 {
		t.Errorf("%d converge or river tables left after down", tables)
	}
	conn.Close()

	if err := migrations.Up(t.Context(), db); err != nil {
		t.Fatalf("up after down: %v", err)
	}
	if st := status(t, db); !st.Current() {
		t.Fatalf("after down and up: %s", st.Description)
	}
}
