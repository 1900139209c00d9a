package pgtest_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/converge-run/converge/test/pgtest"
)

func TestMain(m *testing.M) {
	pgtest.Main(m)
}

// identity reports the name of the database behind databaseURL and whether
// it has the table converge_events.
func identity(t *testing.T, ctx context.Context, databaseURL string) (name string, hasEvents bool) {
	t.Helper()
	conn, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		t.Fatalf("connect %s: %v", databaseURL, err)
	}
	defer func() { _ = conn.Close(ctx) }()
	err = conn.QueryRow(ctx, `SELECT current_database(), to_regclass('converge_events') IS NOT NULL`).Scan(&name, &hasEvents)
	if err != nil {
		t.Fatalf("query %s: %v", databaseURL, err)
	}
	return name, hasEvents
}

func TestNewDatabase(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	a, b := pgtest.NewDatabase(t), pgtest.NewDatabase(t)
	nameA, eventsA := identity(t, ctx, a)
	nameB, eventsB := identity(t, ctx, b)
	if !eventsA || !eventsB {
		t.Fatalf("converge_events missing: %s has it: %t, %s has it: %t", nameA, eventsA, nameB, eventsB)
	}
	if nameA == nameB {
		t.Fatalf("both databases are %s", nameA)
	}

	// A row committed in one is not seen in the other.
	connA, err := pgx.Connect(ctx, a)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer func() { _ = connA.Close(ctx) }()
	if _, err := connA.Exec(ctx, `CREATE TABLE pgtest_marker (id int)`); err != nil {
		t.Fatalf("create marker: %v", err)
	}
	connB, err := pgx.Connect(ctx, b)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer func() { _ = connB.Close(ctx) }()
	var seen bool
	if err := connB.QueryRow(ctx, `SELECT to_regclass('pgtest_marker') IS NOT NULL`).Scan(&seen); err != nil {
		t.Fatalf("look for marker: %v", err)
	}
	if seen {
		t.Fatal("a table created in one database shows in the other")
	}
}

func TestPool(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	if got := pool.Config().MaxConns; got != 4 {
		t.Errorf("MaxConns = %d, want 4", got)
	}
	var name string
	var hasEvents bool
	err := pool.QueryRow(t.Context(), `SELECT current_database(), to_regclass('converge_events') IS NOT NULL`).Scan(&name, &hasEvents)
	if err != nil {
		t.Fatalf("query: %v", err)
	}
	if !hasEvents {
		t.Errorf("package database %s has no converge_events", name)
	}
	if pgtest.AdminURL() == "" {
		t.Error("AdminURL() is empty while a database is in use")
	}
	t.Logf("server %s, package database %s", pgtest.AdminURL(), name)
}

func TestEmptyDatabase(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	a, b := pgtest.EmptyDatabase(t), pgtest.EmptyDatabase(t)
	nameA, eventsA := identity(t, ctx, a)
	nameB, eventsB := identity(t, ctx, b)
	if eventsA || eventsB {
		t.Fatalf("converge_events present: %s has it: %t, %s has it: %t", nameA, eventsA, nameB, eventsB)
	}
	if nameA == nameB {
		t.Fatalf("both databases are %s", nameA)
	}
}

func TestOpenPool(t *testing.T) {
	t.Parallel()
	pool := pgtest.OpenPool(t, pgtest.NewDatabase(t), 2)
	if got := pool.Config().MaxConns; got != 2 {
		t.Errorf("MaxConns = %d, want 2", got)
	}
	if err := pool.Ping(t.Context()); err != nil {
		t.Fatalf("ping: %v", err)
	}
}
