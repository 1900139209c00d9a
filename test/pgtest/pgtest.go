package pgtest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/converge-run/converge/migrations"
	"github.com/converge-run/converge/pgserver"
)

const (
	// templatePrefix starts the name of every template database.
	templatePrefix = "converge_tmpl_"
	// testPrefix starts the name of every database made for tests.
	testPrefix = "converge_test_"
	// templateFormat is mixed into the template hash; bump it when the
	// way a template is built changes.
	templateFormat = "pgtest/1"
	// templateLockKey is the advisory lock (on the admin database) held
	// while a template is built.
	templateLockKey = 0x636f6e7674 // "convt"
	// staleAfter is the age past which a test database nobody is
	// connected to is taken as left behind by a killed test process.
	staleAfter = 2 * time.Hour
	// setupTimeout bounds Main's set-up: finding or starting a server,
	// building the template, creating the package database.
	setupTimeout = 5 * time.Minute
	// poolMaxConns is the size of the pools Pool hands out.
	poolMaxConns = 4
)

// state is set by Main before the tests run and only read afterwards.
var state struct {
	mainRan  bool
	required bool
	err      error // why there is no database
	adminURL string
	template string
	pkg      string // the package part of database names
	url      string // the package database
}

// Main sets up the package database, runs the tests and drops it. Call it
// from TestMain; it does not return.
func Main(m *testing.M) {
	os.Exit(run(m))
}

// Run is Main that returns the exit code instead of exiting, for a
// TestMain that has something to undo after the tests (a PgBouncer, say).
func Run(m *testing.M) int {
	return run(m)
}

// run is Main without the exit, so deferred clean-ups run.
func run(m *testing.M) int {
	state.mainRan = true
	state.required = required()
	state.pkg = packageName()
	cleanup, err := setup()
	defer cleanup()
	if err != nil {
		state.err = err
		if state.required {
			fmt.Fprintf(os.Stderr, "pgtest: no database and TEST_REQUIRE_DB=1: %v\n", err)
			return 1
		}
		fmt.Fprintf(os.Stderr, "pgtest: no database, tests that need one skip: %v\n", err)
	}
	return m.Run()
}

// URL is the connection URL of the test package's database. The test skips
// when there is no database, or fails when TEST_REQUIRE_DB=1.
func URL(t testing.TB) string {
	t.Helper()
	need(t)
	return state.url
}

// Pool is a small pool (at most 4 connections) on the test package's
// database, closed at the test's cleanup.
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return OpenPool(t, URL(t), poolMaxConns)
}

// OpenPool opens a pool of at most maxConns connections on databaseURL
// (from NewDatabase or EmptyDatabase, say), closed at the test's cleanup.
func OpenPool(t testing.TB, databaseURL string, maxConns int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		t.Fatalf("pgtest: parse database url: %v", err)
	}
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("pgtest: open pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// NewDatabase creates a fresh migrated database for this test alone and
// returns its URL; it is dropped WITH (FORCE) at the test's cleanup. Use it
// where a test commits and others must not see it, such as end-to-end tests
// with subprocesses and LISTEN/NOTIFY.
func NewDatabase(t testing.TB) string {
	t.Helper()
	need(t)
	return newDatabase(t, func(ctx context.Context, name string) error {
		return createFromTemplate(ctx, state.adminURL, name, state.template)
	})
}

// EmptyDatabase creates a database without any schema (not a copy of the
// migrated template) for this test alone and returns its URL; it is dropped
// WITH (FORCE) at the test's cleanup. Use it to test migrations, or a
// process started before the schema exists.
func EmptyDatabase(t testing.TB) string {
	t.Helper()
	need(t)
	return newDatabase(t, func(ctx context.Context, name string) error {
		return pgserver.CreateDatabase(ctx, state.adminURL, name, "")
	})
}

// newDatabase creates a database with create under a fresh name, drops it
// at the test's cleanup and returns its URL.
func newDatabase(t testing.TB, create func(ctx context.Context, name string) error) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	name := databaseName(state.pkg)
	if err := create(ctx, name); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := pgserver.DropDatabase(ctx, state.adminURL, name); err != nil {
			t.Errorf("pgtest: %v", err)
		}
	})
	u, err := databaseURL(state.adminURL, name)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return u
}

// AdminURL is the URL of the server's administrative database, on which
// databases are created and dropped, or "" when there is no server.
func AdminURL() string {
	return state.adminURL
}

// need stops the test when there is no database.
func need(t testing.TB) {
	t.Helper()
	switch {
	case !state.mainRan:
		t.Fatal("pgtest: call pgtest.Main(m) from the package's TestMain")
	case state.err != nil && state.required:
		t.Fatalf("pgtest: no database and TEST_REQUIRE_DB=1: %v", state.err)
	case state.err != nil:
		t.Skipf("pgtest: no database: %v", state.err)
	}
}

// required reports whether TEST_REQUIRE_DB asks for a database.
func required() bool {
	v, _ := strconv.ParseBool(os.Getenv("TEST_REQUIRE_DB"))
	return v
}

// setup finds a server, makes sure the template exists and creates the
// package database. The returned cleanup undoes what was done; it is never
// nil.
func setup() (cleanup func(), err error) {
	var undo []func(context.Context) error
	cleanup = func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, f := range slices.Backward(undo) {
			if err := f(ctx); err != nil {
				fmt.Fprintf(os.Stderr, "pgtest: clean up: %v\n", err)
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()

	admin, stop, err := server(ctx)
	if err != nil {
		return cleanup, err
	}
	if stop != nil {
		undo = append(undo, stop)
	}
	state.adminURL = admin
	sweep(ctx, admin)

	tmpl, dropTmpl, err := ensureTemplate(ctx, admin)
	if dropTmpl != nil {
		undo = append(undo, dropTmpl)
	}
	if err != nil {
		return cleanup, err
	}
	state.template = tmpl

	name := databaseName(state.pkg)
	if err := createFromTemplate(ctx, admin, name, tmpl); err != nil {
		return cleanup, err
	}
	undo = append(undo, func(ctx context.Context) error {
		return pgserver.DropDatabase(ctx, admin, name)
	})
	if state.url, err = databaseURL(admin, name); err != nil {
		return cleanup, err
	}
	return cleanup, nil
}

// server finds the server to use and returns its admin URL; stop, when not
// nil, stops the private cluster started for this process.
func server(ctx context.Context) (admin string, stop func(context.Context) error, err error) {
	for _, key := range []string{"TEST_DATABASE_URL", "DATABASE_URL"} {
		if u := os.Getenv(key); u != "" {
			if err := ping(ctx, u); err != nil {
				return "", nil, fmt.Errorf("%s: %w", key, err)
			}
			return u, nil, nil
		}
	}
	if u, ok := pgserver.Find(ctx); ok {
		return u, nil, nil
	}
	dir, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		return "", nil, fmt.Errorf("no server on 127.0.0.1:5432, and no folder for a private one: %w", err)
	}
	srv, err := pgserver.Start(ctx, pgserver.StartOptions{Dir: filepath.Join(dir, "data"), Ephemeral: true})
	if err != nil {
		_ = os.RemoveAll(dir)
		return "", nil, fmt.Errorf("no server on 127.0.0.1:5432, and a private one did not start: %w", err)
	}
	stop = func(ctx context.Context) error {
		err := srv.Stop(ctx)
		if err == nil {
			err = os.RemoveAll(dir)
		}
		return err
	}
	return srv.URL("postgres"), stop, nil
}

// ping checks that databaseURL accepts connections.
func ping(ctx context.Context, databaseURL string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	if err := conn.Ping(ctx); err != nil {
		return fmt.Errorf("ping: %w", err)
	}
	return nil
}

// ensureTemplate makes sure the migrated template database exists on the
// server and returns its name. Test processes running at once take turns
// through an advisory lock on the admin database; a template counts as
// built once it is marked IS_TEMPLATE, which happens last. When the
// migration files cannot be hashed, the template is private to this
// process, and drop (returned even with an error) removes it.
func ensureTemplate(ctx context.Context, admin string) (name string, drop func(context.Context) error, err error) {
	hash, ok := templateHash()
	if ok {
		name = templatePrefix + hash
	} else {
		name = templatePrefix + "nohash_" + randomHex(4)
		drop = func(ctx context.Context) error { return dropTemplate(ctx, admin, name) }
	}

	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return "", nil, fmt.Errorf("connect to admin database: %w", err)
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	built, _, err := templateState(ctx, conn, name)
	if err != nil || built {
		return name, drop, err
	}

	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, templateLockKey); err != nil {
		return "", nil, fmt.Errorf("take template lock: %w", err)
	}
	defer func() {
		_, _ = conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, templateLockKey)
	}()
	built, exists, err := templateState(ctx, conn, name)
	if err != nil || built {
		return name, drop, err
	}
	if exists {
		// Left half-built by a process that died.
		if err := pgserver.DropDatabase(ctx, admin, name); err != nil {
			return "", nil, err
		}
	}
	if err := pgserver.CreateDatabase(ctx, admin, name, "template0"); err != nil {
		return "", drop, err
	}
	u, err := databaseURL(admin, name)
	if err != nil {
		return "", drop, err
	}
	if err := migrations.Up(ctx, u); err != nil {
		return "", drop, fmt.Errorf("migrate template %s: %w", name, err)
	}
	ident := pgx.Identifier{name}.Sanitize()
	// No connections from now on, so none can block a copy; then mark it
	// built.
	for _, sql := range []string{
		`ALTER DATABASE ` + ident + ` ALLOW_CONNECTIONS false`,
		`ALTER DATABASE ` + ident + ` IS_TEMPLATE true`,
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			return "", drop, fmt.Errorf("finish template %s: %w", name, err)
		}
	}
	return name, drop, nil
}

// templateState reports whether the template name exists and whether it
// is complete.
func templateState(ctx context.Context, conn *pgx.Conn, name string) (built, exists bool, err error) {
	err = conn.QueryRow(ctx, `SELECT datistemplate FROM pg_database WHERE datname = $1`, name).Scan(&built)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, false, nil
	}
	if err != nil {
		return false, false, fmt.Errorf("look up template %s: %w", name, err)
	}
	return built, true, nil
}

// dropTemplate drops a template database this process built for itself.
func dropTemplate(ctx context.Context, admin, name string) error {
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return fmt.Errorf("drop template %s: connect: %w", name, err)
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	_, exists, err := templateState(ctx, conn, name)
	if err != nil || !exists {
		return err
	}
	// A template database cannot be dropped.
	if _, err := conn.Exec(ctx, `ALTER DATABASE `+pgx.Identifier{name}.Sanitize()+` IS_TEMPLATE false`); err != nil {
		return fmt.Errorf("drop template %s: %w", name, err)
	}
	return pgserver.DropDatabase(ctx, admin, name)
}

// templateHash hashes what decides the template's content: the migration
// files (read from the source tree next to this file, the same files the
// migrations package embeds), the versions of the modules whose migrations
// run too, and templateFormat. It reports false when the migration files
// cannot be read, as in a binary built with -trimpath.
func templateHash() (string, bool) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", false
	}
	dir := filepath.Join(filepath.Dir(file), "..", "..", "migrations")
	sqls, err := filepath.Glob(filepath.Join(dir, "*.sql"))
	if err != nil || len(sqls) == 0 {
		return "", false
	}
	h := sha256.New()
	h.Write([]byte(templateFormat + "\x00"))
	slices.Sort(sqls)
	for _, p := range sqls {
		b, err := os.ReadFile(p)
		if err != nil {
			return "", false
		}
		fmt.Fprintf(h, "%s\x00%d\x00", filepath.Base(p), len(b))
		h.Write(b)
	}
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			if strings.HasPrefix(dep.Path, "github.com/riverqueue/river") || strings.HasPrefix(dep.Path, "github.com/golang-migrate/migrate") {
				fmt.Fprintf(h, "%s@%s\x00", dep.Path, dep.Version)
			}
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:16], true
}

// createFromTemplate creates name as a copy of tmpl, trying again for a
// while when a session connected to the template blocks the copy.
func createFromTemplate(ctx context.Context, admin, name, tmpl string) error {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		err := pgserver.CreateDatabase(ctx, admin, name, tmpl)
		var pgErr *pgconn.PgError
		if err == nil || !errors.As(err, &pgErr) || pgErr.Code != "55006" { // object_in_use
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-tick.C:
		}
	}
}

// sweep drops test databases left behind by test processes that were
// killed before they could drop them: those older than staleAfter that
// nobody is connected to. It is best effort.
func sweep(ctx context.Context, admin string) {
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	rows, err := conn.Query(ctx, `
		SELECT datname FROM pg_database d
		WHERE datname LIKE 'converge\_test\_%'
		  AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.datid = d.oid)`)
	if err != nil {
		return
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return
	}
	for _, name := range names {
		if created, ok := databaseTime(name); ok && time.Since(created) > staleAfter {
			_ = pgserver.DropDatabase(ctx, admin, name)
		}
	}
}

// databaseName is a new database name for package pkg:
// converge_test_<pkg>_<unix seconds, base 36>_<random>. The time lets
// sweep recognize leftovers.
func databaseName(pkg string) string {
	return testPrefix + pkg + "_" + strconv.FormatInt(time.Now().Unix(), 36) + "_" + randomHex(4)
}

// databaseTime is the creation time encoded in a name from databaseName.
func databaseTime(name string) (time.Time, bool) {
	parts := strings.Split(name, "_")
	if len(parts) < 3 {
		return time.Time{}, false
	}
	secs, err := strconv.ParseInt(parts[len(parts)-2], 36, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.Unix(secs, 0), true
}

// packageName is the test binary's package name ("store" for store.test),
// cut to fit database names.
func packageName() string {
	name := strings.TrimSuffix(filepath.Base(os.Args[0]), ".test")
	var b strings.Builder
	for _, r := range strings.ToLower(name) {
		if b.Len() == 20 {
			break
		}
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	if b.Len() == 0 {
		return "pkg"
	}
	return b.String()
}

// databaseURL is adminURL with its database replaced by name.
func databaseURL(adminURL, name string) (string, error) {
	u, err := url.Parse(adminURL)
	if err != nil || u.Scheme == "" || u.Host == "" && u.Path == "" {
		return "", fmt.Errorf("database url %q must be a postgres:// URL", adminURL)
	}
	u.Path = "/" + name
	u.RawPath = ""
	return u.String(), nil
}

// randomHex is n random bytes in hex.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
