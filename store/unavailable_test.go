package store_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/store"
	"github.com/converge-run/converge/test/pgtest"
)

// TestUnavailable checks which errors become 503 unavailable: the
// database unreachable, read-only or too slow; nothing else. And which
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
		{"undefined table (not migrated)", pg("42P01"), true, false},
		{"undefined column (not migrated)", pg("42703"), true, false},
		{"invalid schema name", pg("3F000"), true, false},
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
