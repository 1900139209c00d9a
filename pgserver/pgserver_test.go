package pgserver_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/converge-run/converge/pgserver"
)

// startCluster starts a private cluster in dir and stops it at cleanup. It
// skips when the machine has no PostgreSQL binaries, unless TEST_REQUIRE_DB=1.
func startCluster(t *testing.T, dir string, settings ...string) *pgserver.Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	srv, err := pgserver.Start(ctx, pgserver.StartOptions{Dir: dir, Ephemeral: true, Settings: settings})
	if err != nil {
		if os.Getenv("TEST_REQUIRE_DB") != "1" && errors.Is(err, pgserver.ErrNoBinaries) {
			t.Skip(err)
		}
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := srv.Stop(context.Background()); err != nil {
			t.Errorf("Stop at cleanup: %v", err)
		}
	})
	return srv
}

// selectOne connects to databaseURL and runs SELECT 1.
func selectOne(ctx context.Context, databaseURL string) error {
	conn, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(ctx) }()
	var one int
	if err := conn.QueryRow(ctx, `SELECT 1`).Scan(&one); err != nil {
		return err
	}
	if one != 1 {
		return errors.New("SELECT 1 did not return 1")
	}
	return nil
}

func TestStart(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := t.TempDir()

	srv := startCluster(t, dir)
	if srv.Port() == 0 {
		t.Fatal("Port() = 0")
	}
	if err := selectOne(ctx, srv.URL("postgres")); err != nil {
		t.Fatalf("SELECT 1: %v", err)
	}

	// A name that needs quoting, created from a template and kept across
	// a restart: the data folder is reused.
	const name = `a "quoted" db`
	if err := pgserver.CreateDatabase(ctx, srv.URL("postgres"), name, "template0"); err != nil {
		t.Fatalf("CreateDatabase: %v", err)
	}
	if err := selectOne(ctx, srv.URL(name)); err != nil {
		t.Fatalf("SELECT 1 in %q: %v", name, err)
	}
	if err := srv.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := srv.Stop(ctx); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if err := selectOne(ctx, srv.URL("postgres")); err == nil {
		t.Fatal("server still accepts connections after Stop")
	}

	again := startCluster(t, dir)
	if err := selectOne(ctx, again.URL(name)); err != nil {
		t.Fatalf("database %q after restart: %v", name, err)
	}
	if err := pgserver.DropDatabase(ctx, again.URL("postgres"), name); err != nil {
		t.Fatalf("DropDatabase: %v", err)
	}
	if err := pgserver.DropDatabase(ctx, again.URL("postgres"), name); err != nil {
		t.Fatalf("DropDatabase of a missing database: %v", err)
	}
	if err := selectOne(ctx, again.URL(name)); err == nil {
		t.Fatalf("database %q still there after DropDatabase", name)
	}
}

// TestStartSettings: the extra settings reach the server, and a setting
// that is not one line is refused before anything starts.
func TestStartSettings(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	srv := startCluster(t, t.TempDir(), "max_wal_size = '3GB'", "checkpoint_timeout = '45min'")
	conn, err := pgx.Connect(ctx, srv.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(ctx) }()
	for name, want := range map[string]string{"max_wal_size": "3GB", "checkpoint_timeout": "45min"} {
		var got string
		if err := conn.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}

	_, err = pgserver.Start(ctx, pgserver.StartOptions{Dir: t.TempDir(), Ephemeral: true, Settings: []string{"work_mem = '8MB'\nfsync = off"}})
	if err == nil || !strings.Contains(err.Error(), "one line per setting") {
		t.Fatalf("Start with a two-line setting: %v, want the one-line error", err)
	}
}

func TestFind(t *testing.T) {
	t.Parallel()
	u, ok := pgserver.Find(t.Context())
	if !ok {
		t.Skip("no server on 127.0.0.1:5432")
	}
	if err := selectOne(t.Context(), u); err != nil {
		t.Fatalf("Find returned %q, which does not answer: %v", u, err)
	}
}
