package faults

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/converge-run/converge/pgserver"
	"github.com/converge-run/converge/test/cvproc"
)

// dbName is the database converge uses in the private cluster.
const dbName = "converge"

// pgCluster is a private PostgreSQL cluster the test may crash, restart,
// lock and make read-only.
type pgCluster struct {
	t     *testing.T
	srv   *pgserver.Server
	pgctl string
	cred  *syscall.Credential
	// pool is the test's own connections to the converge database
	// (superuser: they use the reserved slots when max_connections is
	// low).
	pool *pgxpool.Pool
}

// startPG initializes and starts a private cluster in a temporary folder,
// creates the converge database and migrates it with `converge migrate
// up`. It is stopped at the test's end.
func startPG(t *testing.T) *pgCluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "converge-faults-pg-")
	if err != nil {
		t.Fatal(err)
	}
	// Not Ephemeral: with synchronous_commit off an immediate shutdown
	// loses commits converge was told about. fsync off (below) loses
	// nothing when only PostgreSQL's processes die, and is faster.
	srv, err := pgserver.Start(ctx, pgserver.StartOptions{Dir: filepath.Join(dir, "data")})
	if err != nil {
		_ = os.RemoveAll(dir)
		if os.Getenv("TEST_REQUIRE_DB") == "1" {
			t.Fatalf("no private PostgreSQL cluster (TEST_REQUIRE_DB=1): %v", err)
		}
		t.Skipf("no private PostgreSQL cluster: %v", err)
	}
	c := &pgCluster{t: t, srv: srv}
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), time.Minute)
		defer scancel()
		// A cluster left read-only or with few connections stops all the
		// same.
		_ = c.ctl(sctx, "stop", "-m", "immediate", "-w", "-t", "60")
		_ = srv.Stop(sctx)
		_ = os.RemoveAll(dir)
	})
	if c.pgctl, err = findPgCtl(); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatal(err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		c.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	if err := pgserver.CreateDatabase(ctx, srv.URL("postgres"), dbName, ""); err != nil {
		t.Fatal(err)
	}
	if err := c.Exec(ctx, "ALTER SYSTEM SET fsync = off", "SELECT pg_reload_conf()"); err != nil {
		t.Fatal(err)
	}
	cvproc.Build(t)
	mig := cvproc.Start(t, cvproc.Options{Args: []string{"migrate", "up"}, Env: cvproc.Env("DATABASE_URL=" + c.URL()), Name: "migrate"})
	if code := mig.Wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("migrate up: exit %d\n%s", code, mig.Stderr())
	}
	cfg, err := pgxpool.ParseConfig(c.URL())
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 4
	cfg.ConnConfig.RuntimeParams["application_name"] = "faults-check"
	if c.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.pool.Close)
	return c
}

// findPgCtl finds pg_ctl on PATH or under /usr/lib/postgresql/*/bin.
func findPgCtl() (string, error) {
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		return p, nil
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_ctl")
	if len(matches) == 0 {
		return "", fmt.Errorf("pg_ctl not found")
	}
	return matches[len(matches)-1], nil
}

// URL is the converge database's URL.
func (c *pgCluster) URL() string { return c.srv.URL(dbName) }

// Addr is the cluster's host:port.
func (c *pgCluster) Addr() string { return "127.0.0.1:" + strconv.Itoa(c.srv.Port()) }

// ctl runs pg_ctl on the cluster's data folder (as user postgres when the
// test runs as root).
func (c *pgCluster) ctl(ctx context.Context, args ...string) error {
	args = append(args, "-D", c.srv.Dir())
	cmd := exec.CommandContext(ctx, c.pgctl, args...)
	cmd.Dir = "/"
	if c.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("pg_ctl %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// RestartImmediate is `pg_ctl restart -m immediate`: every backend is
// killed at once (no checkpoint, crash recovery at start-up), then the
// server starts again. It returns once the server accepts connections.
func (c *pgCluster) RestartImmediate(ctx context.Context) error {
	return c.ctl(ctx, "restart", "-m", "immediate", "-w", "-t", "120", "-l", filepath.Join(c.srv.Dir(), "server.log"))
}

// StopImmediate stops the server as an immediate shutdown (a crash, as far
// as clients can tell); Start starts it again.
func (c *pgCluster) StopImmediate(ctx context.Context) error {
	return c.ctl(ctx, "stop", "-m", "immediate", "-w", "-t", "60")
}

// Start starts a stopped server and waits until it accepts connections.
func (c *pgCluster) Start(ctx context.Context) error {
	return c.ctl(ctx, "start", "-w", "-t", "120", "-l", filepath.Join(c.srv.Dir(), "server.log"))
}

// RestartFast restarts the server cleanly (for settings that need a
// restart, such as max_connections).
func (c *pgCluster) RestartFast(ctx context.Context) error {
	return c.ctl(ctx, "restart", "-m", "fast", "-w", "-t", "120", "-l", filepath.Join(c.srv.Dir(), "server.log"))
}

// Exec runs sql on a fresh superuser connection to the converge database
// that is not read-only (so that a read-only primary can be turned back).
func (c *pgCluster) Exec(ctx context.Context, sqls ...string) error {
	conn, err := pgx.Connect(ctx, c.URL()+"&application_name=faults-admin")
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	if _, err := conn.Exec(ctx, "SET default_transaction_read_only = off"); err != nil {
		return err
	}
	for _, q := range sqls {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	return nil
}

// TerminateBackends ends every backend of the converge database but the
// caller's (pg_terminate_backend) and returns how many it ended.
func (c *pgCluster) TerminateBackends(ctx context.Context) (int, error) {
	conn, err := pgx.Connect(ctx, c.URL()+"&application_name=faults-admin")
	if err != nil {
		return 0, err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	var n int
	err = conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = $1 AND pid <> pg_backend_pid() AND backend_type = 'client backend'
		  AND coalesce(application_name, '') NOT LIKE 'faults-%'`, dbName).Scan(&n)
	return n, err
}

// WaitUp waits until the converge database answers.
func (c *pgCluster) WaitUp(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		conn, err := pgx.Connect(ctx, c.URL())
		if err == nil {
			_ = conn.Close(ctx)
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("database not up after %s: %w", timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
