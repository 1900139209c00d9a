package store_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/migrations"
	"github.com/converge-run/converge/store"
	"github.com/converge-run/converge/test/pgtest"
)

// TestUnavailable checks which errors become 503 unavailable: the
// database unreachable, read-only or too slow; nothing else (a missing
// table or column neither, without a look at the schema). And which
// of them are outages (store.IsOutage): all but a slow database.
func TestUnavailable(t *testing.T) {
	t.Parallel()
	pg := func(code string) error {
		return fmt.Errorf("lock stream: %w", &pgconn.PgError{Code: code, Message: "secret detail"})
	}
	// A dial ended by a deadline (connect_timeout, or a host that drops
	// packets): a *pgconn.ConnectError wrapping context.DeadlineExceeded.
	expired, cancel := context.WithDeadline(t.Context(), time.Now().Add(-time.Second))
	defer cancel()
	_, dialTimeout := pgconn.Connect(expired, "postgres://postgres@127.0.0.1:1/x?sslmode=disable")
	var ce *pgconn.ConnectError
	if !errors.As(dialTimeout, &ce) || !errors.Is(dialTimeout, context.DeadlineExceeded) {
		t.Fatalf("dial with an expired deadline: %v, want a ConnectError wrapping the deadline", dialTimeout)
	}
	cases := []struct {
		name string
		err  error
		want bool
		// outage: the database could record nothing (store.IsOutage).
		outage bool
	}{
		{"read-only", pg("25006"), true, true},
		{"statement_timeout", pg("57014"), true, false},
		{"lock_timeout", pg("55P03"), true, false},
		{"admin shutdown", pg("57P01"), true, true},
		{"crash shutdown", pg("57P02"), true, true},
		{"not yet accepting connections", pg("57P03"), true, true},
		{"connection failure", pg("08006"), true, true},
		{"too many connections", pg("53300"), true, true},
		{"context deadline", fmt.Errorf("begin: %w", context.DeadlineExceeded), true, false},
		{"connection lost", fmt.Errorf("read: %w", io.ErrUnexpectedEOF), true, true},
		{"dial ended by a deadline", fmt.Errorf("acquire: %w", dialTimeout), true, true},
		{"conn closed", pgconn.ErrConnClosed, true, true},
		// A table, a column or a schema missing: a bug unless the schema is
		// not current, which only Store.Unavailable looks at
		// (TestStoreUnavailableSchema).
		{"undefined table", pg("42P01"), false, false},
		{"undefined column", pg("42703"), false, false},
		{"invalid schema name", pg("3F000"), false, false},
		{"unique violation", pg("23505"), false, false},
		{"syntax error (a bug)", pg("42601"), false, false},
		{"deadlock", pg("40P01"), false, false},
		{"context cancelled", context.Canceled, false, false},
		{"plain error", errors.New("something broke"), false, false},
		{"application error", &converge.AppError{Code: converge.EINVALID, Message: "payload: bad"}, false, false},
	}
	for _, tc := range cases {
		err := store.Unavailable(tc.err)
		got := converge.ErrorCode(err) == converge.EUNAVAILABLE
		if got != tc.want || store.IsUnavailable(tc.err) != tc.want {
			t.Errorf("%s: Unavailable(%v) = %v (code %s), want unavailable %v", tc.name, tc.err, err, converge.ErrorCode(err), tc.want)
		}
		if store.IsOutage(tc.err) != tc.outage || store.IsOutage(err) != tc.outage {
			t.Errorf("%s: IsOutage(%v) = %v, IsOutage of it translated = %v, want %v", tc.name, tc.err, store.IsOutage(tc.err), store.IsOutage(err), tc.outage)
		}
		if !got {
			if err != tc.err {
				t.Errorf("%s: Unavailable changed an error it does not translate: %v", tc.name, err)
			}
			continue
		}
		var app *converge.AppError
		if !errors.As(err, &app) || strings.Contains(app.Message, "secret detail") || !errors.Is(err, errors.Unwrap(tc.err)) && !errors.Is(err, tc.err) {
			t.Errorf("%s: %v: want the application error (without the database's text) and the cause in the chain", tc.name, err)
		}
	}
	if store.Unavailable(nil) != nil {
		t.Error("Unavailable(nil) != nil")
	}
}

// TestProbe checks the readiness probe: ready, then too slow while
// converge_streams is locked, within the probe's timeout.
func TestProbe(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.Pool(t)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		t.Fatal(err)
	}
	st := store.New(pool, client)
	if reason := st.Probe(ctx, time.Second); reason != "" {
		t.Fatalf("Probe of a healthy database = %q, want \"\"", reason)
	}
	other := pgtest.OpenPool(t, pgtest.URL(t), 1)
	tx, err := other.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, `LOCK TABLE converge_streams IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	if reason := st.Probe(ctx, 200*time.Millisecond); reason != store.ReasonTooSlow || time.Since(began) > 2*time.Second {
		t.Errorf("Probe under a lock = %q after %s, want %q within 2s", reason, time.Since(began), store.ReasonTooSlow)
	}
	_ = tx.Rollback(ctx)
	if reason := st.Probe(ctx, time.Second); reason != "" {
		t.Errorf("Probe after the lock = %q, want \"\"", reason)
	}
}

// TestTransactionTimeouts checks that TransactionTimeouts sets the
// timeouts of each transaction alone: a lock wait ends at lock_timeout
// (55P03, unavailable), and nothing stays on the connection.
func TestTransactionTimeouts(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.OpenPool(t, pgtest.URL(t), 1)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		t.Fatal(err)
	}
	st := store.New(pool, client, store.TransactionTimeouts(0, 150*time.Millisecond))
	other := pgtest.OpenPool(t, pgtest.URL(t), 1)
	tx, err := other.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, `LOCK TABLE converge_streams IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	_, err = st.EventAccept(ctx, store.EventAcceptParams{
		EventSubmission: converge.EventSubmission{Kind: "build", Resource: "timeouts/x", Version: 1, Payload: []byte(`{}`)}, MaxAttempts: 1,
	})
	if converge.ErrorCode(err) != converge.EUNAVAILABLE || time.Since(began) > 3*time.Second {
		t.Errorf("EventAccept under a lock: %v after %s, want unavailable within lock_timeout", err, time.Since(began))
	}
	_ = tx.Rollback(ctx)
	var lockTimeout string
	if err := pool.QueryRow(ctx, `SHOW lock_timeout`).Scan(&lockTimeout); err != nil || lockTimeout != "0" {
		t.Errorf("lock_timeout of the session after the transaction: %q %v, want 0 (nothing left on the connection)", lockTimeout, err)
	}
}

// TestStoreUnavailableSchema: a statement that finds a column missing is
// 503 "schema not current" only while the schema is not current (here:
// dirty, or a check that says so); on a current schema it is a bug, kept
// as it is (500 internal). What the store learnt of the schema is kept for
// a second, and a failed look on an unavailable database is unavailable.
func TestStoreUnavailableSchema(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.OpenPool(t, pgtest.NewDatabase(t), 3)
	newStore := func(opts ...store.Option) *store.Store {
		client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
		if err != nil {
			t.Fatal(err)
		}
		return store.New(pool, client, opts...)
	}
	// A query of this binary that names a column the table lacks: 42703
	// on a schema whose migrations are all applied.
	if _, err := pool.Exec(ctx, `ALTER TABLE converge_tokens DROP COLUMN hash`); err != nil {
		t.Fatal(err)
	}
	audit := converge.AuditEntry{Actor: "admin", Role: "admin", Action: "token.create"}
	create := func(st *store.Store) error {
		_, _, err := st.TokenCreate(ctx, "t-"+fmt.Sprint(time.Now().UnixNano()), converge.RoleViewer, audit)
		if err == nil {
			t.Fatal("TokenCreate without its hash column succeeded")
		}
		return err
	}
	wantBug := func(name string, err error) {
		t.Helper()
		var pgErr *pgconn.PgError
		if code := converge.ErrorCode(err); code == converge.EUNAVAILABLE || store.IsSchemaNotCurrent(err) || !errors.As(err, &pgErr) || pgErr.Code != "42703" {
			t.Errorf("%s: %v (code %q), want the 42703 as it is (500 internal)", name, err, code)
		}
	}
	wantNotCurrent := func(name string, err error) {
		t.Helper()
		var app *converge.AppError
		if !errors.As(err, &app) || app.Code != converge.EUNAVAILABLE || !strings.HasPrefix(app.Message, store.ReasonSchemaNotCurrent) || !store.IsSchemaNotCurrent(err) {
			t.Errorf("%s: %v, want 503 unavailable %q", name, err, store.ReasonSchemaNotCurrent)
		}
		if store.IsOutage(err) {
			t.Errorf("%s: a schema not current is no outage", name)
		}
	}

	// The store's own look: migrated and clean, so a bug.
	st := newStore()
	wantBug("current schema", create(st))

	// Dirty: not current, once the kept look (a second) is over.
	if _, err := pool.Exec(ctx, `UPDATE schema_migrations SET dirty = true`); err != nil {
		t.Fatal(err)
	}
	wantBug("dirty, within a second of the look", create(st))
	time.Sleep(1100 * time.Millisecond)
	wantNotCurrent("dirty", create(st))
	if _, err := pool.Exec(ctx, `UPDATE schema_migrations SET dirty = false`); err != nil {
		t.Fatal(err)
	}

	// The check of the migrations (store.SchemaCheck), asked once a second.
	var calls atomic.Int32
	var current atomic.Bool
	current.Store(true)
	checked := newStore(store.SchemaCheck(func(context.Context, *pgxpool.Pool) (bool, error) {
		calls.Add(1)
		return current.Load(), nil
	}))
	for range 3 {
		wantBug("check says current", create(checked))
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("3 failures within a second asked the check %d times, want 1", n)
	}
	current.Store(false)
	time.Sleep(1100 * time.Millisecond)
	wantNotCurrent("check says behind", create(checked))
	// Unavailable of a raw error (the API's reads outside a transaction).
	raw := fmt.Errorf("list: %w", &pgconn.PgError{Code: "42P01"})
	wantNotCurrent("raw 42P01, behind", checked.Unavailable(ctx, raw))
	if err := checked.Unavailable(ctx, fmt.Errorf("x: %w", &pgconn.PgError{Code: "42601"})); converge.ErrorCode(err) == converge.EUNAVAILABLE {
		t.Errorf("a syntax error is unavailable: %v", err)
	}

	// The migrations' own check, as cmd wires it: a version behind this
	// binary is not current.
	migrationsCheck := store.SchemaCheck(func(ctx context.Context, pool *pgxpool.Pool) (bool, error) {
		s, err := migrations.StatusOf(ctx, pool)
		return s.Current(), err
	})
	wantBug("migrations current", create(newStore(migrationsCheck)))
	if _, err := pool.Exec(ctx, `UPDATE schema_migrations SET version = version - 1`); err != nil {
		t.Fatal(err)
	}
	wantNotCurrent("migrations behind", create(newStore(migrationsCheck)))

	// A look that fails: unavailable when the database is, else a bug.
	failing := func(err error) *store.Store {
		return newStore(store.SchemaCheck(func(context.Context, *pgxpool.Pool) (bool, error) { return false, err }))
	}
	var app *converge.AppError
	if err := failing(&pgconn.PgError{Code: "57P03"}).Unavailable(ctx, raw); !errors.As(err, &app) || app.Code != converge.EUNAVAILABLE ||
		!strings.HasPrefix(app.Message, store.ReasonUnreachable) || store.IsSchemaNotCurrent(err) || !errors.Is(err, errors.Unwrap(raw)) {
		t.Errorf("look on a starting database: %v, want 503 %q with the cause kept", err, store.ReasonUnreachable)
	}
	if err := failing(errors.New("bad migrations")).Unavailable(ctx, raw); err != raw {
		t.Errorf("look that failed otherwise: %v, want the error unchanged", err)
	}
}
