package outage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/converge-run/converge/pgserver"
	"github.com/converge-run/converge/test/cvproc"
	"github.com/converge-run/converge/test/pgtest"
	"github.com/converge-run/converge/test/testkit"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// adminToken is CONVERGE_ADMIN_TOKEN of every process.
const adminToken = "outage-admin-token-0123456789"

// cluster is a private PostgreSQL cluster that a test stops and starts
// again, on the same data folder and port.
type cluster struct {
	t   *testing.T
	dir string
	srv *pgserver.Server
}

// ephemeral is false: the clusters keep fsync and synchronous_commit, so
// that a crash (pg_ctl stop -m immediate) loses no acknowledged
// transaction, as on a real server (the ephemeral settings of test
// clusters would lose the last ones).
const ephemeral = false

// newCluster initializes and starts a private cluster; it is stopped at
// the test's cleanup. It skips when the machine has no PostgreSQL
// binaries, unless TEST_REQUIRE_DB=1.
func newCluster(t *testing.T) *cluster {
	t.Helper()
	c := &cluster{t: t, dir: t.TempDir()}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	srv, err := pgserver.Start(ctx, pgserver.StartOptions{Dir: c.dir, Ephemeral: ephemeral})
	if err != nil {
		if os.Getenv("TEST_REQUIRE_DB") != "1" && errors.Is(err, pgserver.ErrNoBinaries) {
			t.Skip(err)
		}
		t.Fatalf("start cluster: %v", err)
	}
	c.srv = srv
	t.Cleanup(func() {
		if err := c.srv.Stop(context.Background()); err != nil {
			t.Errorf("stop cluster at cleanup: %v", err)
		}
	})
	return c
}

// url is the URL of the cluster's postgres database.
func (c *cluster) url() string { return c.srv.URL("postgres") }

// stop stops the cluster (pg_ctl stop -m fast: clients are disconnected).
func (c *cluster) stop() {
	c.t.Helper()
	if err := c.srv.Stop(c.t.Context()); err != nil {
		c.t.Fatalf("stop cluster: %v", err)
	}
}

// start starts the stopped cluster again on its port.
func (c *cluster) start() {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(c.t.Context(), 2*time.Minute)
	defer cancel()
	srv, err := pgserver.Start(ctx, pgserver.StartOptions{Dir: c.dir, Port: c.srv.Port(), Ephemeral: ephemeral})
	if err != nil {
		c.t.Fatalf("start cluster again: %v", err)
	}
	c.srv = srv
}

// crash stops the cluster the way a crash would (pg_ctl stop -m
// immediate: no shutdown checkpoint), so that the next start runs crash
// recovery, during which the server answers 57P03 "the database system is
// not yet accepting connections".
func (c *cluster) crash() {
	c.t.Helper()
	pgctl, err := pgCtl()
	if err != nil {
		c.t.Skip(err)
	}
	cmd := exec.Command(pgctl, "stop", "-D", c.srv.Dir(), "-m", "immediate", "-w", "-s")
	if os.Geteuid() == 0 {
		// The cluster runs as postgres (pgserver), and pg_ctl refuses root.
		pg, err := user.Lookup("postgres")
		if err != nil {
			c.t.Fatal(err)
		}
		uid, _ := strconv.Atoi(pg.Uid)
		gid, _ := strconv.Atoi(pg.Gid)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		c.t.Fatalf("pg_ctl stop -m immediate: %v: %s", err, out)
	}
}

// pgCtl finds pg_ctl on PATH or under /usr/lib/postgresql/*/bin, newest
// first.
func pgCtl() (string, error) {
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		return p, nil
	}
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_ctl")
	if len(found) == 0 {
		return "", errors.New("no pg_ctl")
	}
	slices.Sort(found)
	return found[len(found)-1], nil
}

// exec runs sql (one statement) on the cluster's postgres database.
func (c *cluster) exec(sql string) {
	c.t.Helper()
	execURL(c.t, c.url(), sql)
}

// connectURL opens a connection of its own to databaseURL, with a context
// that bounds what is done on it to 30 s; done closes both.
func connectURL(t *testing.T, databaseURL string) (ctx context.Context, conn *pgx.Conn, done func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	conn, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		cancel()
		t.Fatalf("connect: %v", err)
	}
	return ctx, conn, func() {
		_ = conn.Close(context.Background())
		cancel()
	}
}

// execURL runs statements, one by one, on databaseURL in a connection of
// their own.
func execURL(t *testing.T, databaseURL string, sqls ...string) {
	t.Helper()
	ctx, conn, done := connectURL(t, databaseURL)
	defer done()
	for _, sql := range sqls {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
}

// target is a recording HTTP target that answers 200.
type target struct {
	srv   *httptest.Server
	calls atomic.Int64
}

func newTarget(t *testing.T) *target {
	t.Helper()
	tg := &target{}
	tg.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tg.calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
	t.Cleanup(tg.srv.Close)
	return tg
}

// config is a configuration for databaseURL and tg, with extra YAML
// lines (top-level keys) appended.
func config(databaseURL string, tg *target, extra string) string {
	return fmt.Sprintf(`listen: 127.0.0.1:0
database_url: %s
shutdown_timeout: 5s
river: {fetch_poll_interval: 20ms}
kinds:
  build:
    target:
      http: {url: %s/build, timeout: 10s}
    max_attempts: 5
    backoff: {initial: 50ms, max: 500ms}
    debounce: 1ms
%s`, databaseURL, tg.srv.URL, extra)
}

// proc starts `converge args...` with the admin token and returns it with
// its base URL once it listens.
func proc(t *testing.T, args ...string) (*cvproc.Process, string) {
	t.Helper()
	p := cvproc.Start(t, cvproc.Options{Args: args, Env: cvproc.Env("CONVERGE_ADMIN_TOKEN=" + adminToken)})
	return p, p.URL(t, 60*time.Second)
}

// call sends method path (with body as JSON when not nil) to base, with
// the admin token unless path is an ops path.
func call(t *testing.T, base, method, path string, body any) testkit.Answer {
	t.Helper()
	return testkit.Client{Base: base, Token: adminToken, TokenPrefix: "/v1/", Timeout: 60 * time.Second}.Do(t, method, path, body)
}

// submit posts build resource@version and returns the answer.
func submit(t *testing.T, base, resource string, version int) testkit.Answer {
	t.Helper()
	return call(t, base, http.MethodPost, "/v1/events", map[string]any{
		"kind": "build", "resource": resource, "version": version, "payload": map[string]any{"ref": "main", "n": version},
	})
}

// wantUnavailable fails the test unless a is 503 unavailable with a
// problem body and a Retry-After.
func wantUnavailable(t *testing.T, what string, a testkit.Answer) {
	t.Helper()
	if a.Status != http.StatusServiceUnavailable || a.Body["type"] != "urn:converge:problem:unavailable" ||
		a.Header.Get("Retry-After") == "" || a.Header.Get("Content-Type") != "application/problem+json" {
		t.Errorf("%s: %d %s (Retry-After %q), want 503 unavailable with Retry-After", what, a.Status, a.Raw, a.Header.Get("Retry-After"))
	}
}

// waitReady waits until base's /readyz answers 200.
func waitReady(t *testing.T, base string, timeout time.Duration) {
	t.Helper()
	testkit.Eventually(t, timeout, func() (bool, string) {
		a := call(t, base, http.MethodGet, "/readyz", nil)
		return a.Status == http.StatusOK, fmt.Sprintf("readyz of %s: %d %s", base, a.Status, a.Raw)
	})
}

// wantNotReady fails the test unless base's /readyz answers 503 with
// reason and /healthz answers 200.
func wantNotReady(t *testing.T, base, reason string) {
	t.Helper()
	if a := call(t, base, http.MethodGet, "/healthz", nil); a.Status != http.StatusOK {
		t.Errorf("healthz of %s: %d %s, want 200", base, a.Status, a.Raw)
	}
	if a := call(t, base, http.MethodGet, "/readyz", nil); a.Status != http.StatusServiceUnavailable || a.Body["reason"] != reason {
		t.Errorf("readyz of %s: %d %s, want 503 %q", base, a.Status, a.Raw, reason)
	}
}

// waitSucceeded waits until event id has succeeded.
func waitSucceeded(t *testing.T, base, id string, timeout time.Duration) {
	t.Helper()
	testkit.Eventually(t, timeout, func() (bool, string) {
		a := call(t, base, http.MethodGet, "/v1/events/"+id, nil)
		return a.Body["status"] == "succeeded", fmt.Sprintf("event %s: %d %v", id, a.Status, a.Body["status"])
	})
}

// eventID is the event id of an accepted answer.
func eventID(t *testing.T, a testkit.Answer) string {
	t.Helper()
	ev, _ := a.Body["event"].(map[string]any)
	id, _ := ev["id"].(string)
	if a.Status != http.StatusAccepted || id == "" {
		t.Fatalf("submit: %d %s, want 202", a.Status, a.Raw)
	}
	return id
}
