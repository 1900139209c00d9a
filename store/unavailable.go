package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/converge-run/converge"
)

// The reasons a readiness probe gives (SPEC §15), and the messages of the
// unavailable errors.
const (
	ReasonUnreachable = "database unreachable"
	ReasonReadOnly    = "database read-only"
	ReasonTooSlow     = "database too slow"
	// reasonNoResources is no probe's reason, only the start of a
	// message.
	reasonNoResources = "database out of resources"
	// ReasonSchemaNotCurrent is the start of the message of a statement
	// that found a table, a column or a schema missing on a database
	// whose schema is not current: never migrated, or not to this
	// version (/readyz says the same; Store.Unavailable).
	ReasonSchemaNotCurrent = "schema not current"
)

// unavailableError is a database failure that is no bug of the request or
// of converge: the database is unreachable, read-only or too slow. Its
// chain holds both the application error (converge.EUNAVAILABLE, 503) and
// the cause, which is logged but never shown to a client.
type unavailableError struct {
	app   *converge.AppError
	cause error
}

// Error implements error.
func (e *unavailableError) Error() string { return e.app.Error() + ": " + e.cause.Error() }

// Unwrap returns the application error and the cause.
func (e *unavailableError) Unwrap() []error { return []error{e.app, e.cause} }

// Unavailable returns err as a converge.EUNAVAILABLE error (503
// unavailable) when it says that the database could not serve the call:
// a connection that failed or was lost (class 08, 57P01-57P03, a network
// error, any error the server sent while a connection was being made),
// too many connections (class 53), a read-only database (25006),
// a statement cancelled by statement_timeout (57014), a lock not granted
// within lock_timeout (55P03), or a context deadline (request_timeout).
// Any other error, an application error included, is returned unchanged,
// so that 500 internal stays for bugs. A table, a column or a schema
// missing (42P01, 42703, 3F000) is unchanged too: it is a bug (a typo in a
// query) unless the schema is not current, which only a look at the
// database tells; Store.Unavailable looks.
func Unavailable(err error) error {
	if err == nil {
		return nil
	}
	var app *converge.AppError
	if errors.As(err, &app) {
		return err
	}
	msg := unavailableMessage(err)
	if msg == "" {
		return err
	}
	return &unavailableError{app: &converge.AppError{Code: converge.EUNAVAILABLE, Message: msg}, cause: err}
}

// schemaCheckTTL is how long Store.Unavailable keeps what it learnt of
// the schema: a burst of failing statements asks the database once.
const schemaCheckTTL = time.Second

// schemaCheckTimeout bounds one look at the schema.
const schemaCheckTimeout = 2 * time.Second

// SchemaCheckFunc reports whether the schema of the database behind pool
// is current for this binary: every migration applied, none dirty.
type SchemaCheckFunc func(ctx context.Context, pool *pgxpool.Pool) (bool, error)

// SchemaCheck makes Store.Unavailable ask check whether the schema is
// current (the check /readyz makes: the migration versions). Without it
// the store only sees a schema that was never migrated or is dirty
// (schemaApplied), not one behind this binary.
func SchemaCheck(check SchemaCheckFunc) Option {
	return func(s *Store) { s.schema.check = check }
}

// schemaState is what Store.Unavailable learnt of the schema, for
// schemaCheckTTL.
type schemaState struct {
	check SchemaCheckFunc
	mu    sync.Mutex
	at    time.Time
	ok    bool
	err   error
}

// Unavailable is the package's Unavailable, and for a table, a column or
// a schema missing (42P01, 42703, 3F000) it looks at the schema, at most
// once per schemaCheckTTL: when it is not current (never migrated, behind
// this binary, dirty) the error is 503 unavailable, "schema not current";
// when it is current the error is a bug and returned unchanged (500
// internal, logged). A look that fails on a database that is unavailable
// makes the error unavailable for that reason; any other failure leaves it
// unchanged.
func (s *Store) Unavailable(ctx context.Context, err error) error {
	err = Unavailable(err)
	if s == nil || !missingObject(err) {
		return err
	}
	current, checkErr := s.schemaCurrent(ctx)
	switch {
	case checkErr != nil:
		if msg := unavailableMessage(checkErr); msg != "" {
			return &unavailableError{app: &converge.AppError{Code: converge.EUNAVAILABLE, Message: msg}, cause: err}
		}
		return err
	case current:
		return err
	}
	const msg = ReasonSchemaNotCurrent + " (run converge migrate); try again later"
	return &unavailableError{app: &converge.AppError{Code: converge.EUNAVAILABLE, Message: msg}, cause: err}
}

// missingObject reports whether err is PostgreSQL finding a table, a
// column or a schema missing, and no application error.
func missingObject(err error) bool {
	var pgErr *pgconn.PgError
	var app *converge.AppError
	if errors.As(err, &app) || !errors.As(err, &pgErr) {
		return false
	}
	return pgErr.Code == "42P01" || pgErr.Code == "42703" || pgErr.Code == "3F000"
}

// schemaCurrent reports whether the schema is current, from the last look
// (a failed one too) when it is younger than schemaCheckTTL. Concurrent
// callers wait for one look.
func (s *Store) schemaCurrent(ctx context.Context) (bool, error) {
	st := &s.schema
	st.mu.Lock()
	defer st.mu.Unlock()
	if !st.at.IsZero() && time.Since(st.at) < schemaCheckTTL {
		return st.ok, st.err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), schemaCheckTimeout)
	defer cancel()
	check := st.check
	if check == nil {
		check = schemaApplied
	}
	ok, err := check(ctx, s.pool)
	st.at, st.ok, st.err = time.Now(), ok && err == nil, err
	return st.ok, err
}

// schemaApplied is the store's own schema check, without the list of
// migrations: both migration tables exist and ours records a clean
// version.
func schemaApplied(ctx context.Context, pool *pgxpool.Pool) (bool, error) {
	var ours, river bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass('schema_migrations') IS NOT NULL, to_regclass('river_migration') IS NOT NULL`).Scan(&ours, &river); err != nil {
		return false, fmt.Errorf("read schema status: %w", err)
	}
	if !ours || !river {
		return false, nil
	}
	var clean bool
	err := pool.QueryRow(ctx, `SELECT NOT dirty FROM schema_migrations LIMIT 1`).Scan(&clean)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read schema version: %w", err)
	}
	return clean, nil
}

// unavailableMessage is the client's message for an error that makes the
// database unavailable, or "" for any other error.
func unavailableMessage(err error) string {
	const retry = "; try again later"
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch code := pgErr.Code; {
		case code == "25006":
			return ReasonReadOnly + retry
		case code == "57014":
			return ReasonTooSlow + " (a statement ran past its timeout)" + retry
		case code == "55P03":
			return ReasonTooSlow + " (a lock was not granted within lock_timeout)" + retry
		case code == "57P01" || code == "57P02" || code == "57P03" || strings.HasPrefix(code, "08"):
			return ReasonUnreachable + retry
		case strings.HasPrefix(code, "53"):
			return reasonNoResources + " (connections, memory or disk)" + retry
		}
		// The server refused the connection itself (a database that
		// does not allow connections, 55000; one dropped or renamed,
		// 3D000; a login refused, class 28): no statement of any request
		// can run, which is the database unreachable, not a bug.
		var connectErr *pgconn.ConnectError
		if errors.As(err, &connectErr) {
			return ReasonUnreachable + retry
		}
		return ""
	}
	// A connection that could not be made is the database unreachable,
	// even when what ended the dial was a deadline (connect_timeout, a
	// host that drops packets).
	var connectErr *pgconn.ConnectError
	if errors.As(err, &connectErr) && !errors.Is(err, context.Canceled) {
		return ReasonUnreachable + retry
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded), pgconn.Timeout(err):
		return ReasonTooSlow + " (the request ran past its timeout)" + retry
	case errors.Is(err, context.Canceled):
		return ""
	}
	var netErr net.Error
	switch {
	case errors.As(err, &netErr),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, pgconn.ErrConnClosed),
		pgconn.SafeToRetry(err), strings.Contains(err.Error(), "conn closed"), strings.Contains(err.Error(), "closed pool"):
		return ReasonUnreachable + retry
	}
	return ""
}

// IsUnavailable reports whether err is (or would be translated by
// Unavailable into) a converge.EUNAVAILABLE error.
func IsUnavailable(err error) bool {
	return converge.ErrorCode(Unavailable(err)) == converge.EUNAVAILABLE
}

// IsSchemaNotCurrent reports whether err is the unavailable error
// Store.Unavailable made of a missing table, column or schema on a
// database whose schema is not current. Waiting does not mend it;
// migrating does.
func IsSchemaNotCurrent(err error) bool {
	var ue *unavailableError
	return errors.As(err, &ue) && strings.HasPrefix(ue.app.Message, ReasonSchemaNotCurrent)
}

// IsOutage reports whether err says that the database could record
// nothing at all: it is unreachable (a connection that failed or was lost,
// a server shutting down, starting or recovering), read-only, or out of
// resources. A database that is only slow (a statement or lock timeout, a
// context deadline), a schema that is not current, a cancelled context, an
// application error and a bug are no outage.
func IsOutage(err error) bool {
	if err == nil {
		return false
	}
	var ue *unavailableError
	var app *converge.AppError
	switch {
	case errors.As(err, &ue):
		err = ue.cause
	case errors.As(err, &app):
		return false
	}
	msg := unavailableMessage(err)
	return strings.HasPrefix(msg, ReasonUnreachable) || strings.HasPrefix(msg, ReasonReadOnly) || strings.HasPrefix(msg, reasonNoResources)
}

// Probe is the database's part of a readiness check (/readyz). In one
// transaction whose statement_timeout and lock_timeout are timeout (set
// with set_config(..., true), so nothing stays on a pooled connection) it
// reads whether the database takes writes and reads a row of
// converge_streams, which waits behind a lock on that table (when the
// table does not exist yet, the schema check that follows says so). It
// returns "" when the database serves, or the reason it does not:
// ReasonUnreachable, ReasonReadOnly or ReasonTooSlow.
func (s *Store) Probe(ctx context.Context, timeout time.Duration) string {
	ctx, cancel := context.WithTimeout(ctx, timeout+time.Second)
	defer cancel()
	var readOnly bool
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		ms := fmt.Sprintf("%dms", max(timeout.Milliseconds(), 1))
		var streams bool
		if err := tx.QueryRow(ctx, `SELECT set_config('statement_timeout', $1, true) IS NOT NULL,
			set_config('lock_timeout', $1, true) IS NOT NULL,
			current_setting('default_transaction_read_only') = 'on' OR pg_is_in_recovery(),
			to_regclass('converge_streams') IS NOT NULL`, ms).Scan(new(bool), new(bool), &readOnly, &streams); err != nil {
			return err
		}
		if !streams {
			return nil
		}
		_, err := tx.Exec(ctx, `SELECT 1 FROM converge_streams LIMIT 1`)
		return err
	})
	switch {
	case err == nil && readOnly:
		return ReasonReadOnly
	case err == nil:
		return ""
	}
	var pgErr *pgconn.PgError
	var connectErr *pgconn.ConnectError
	if errors.As(err, &connectErr) {
		return ReasonUnreachable
	}
	if errors.As(err, &pgErr) && (pgErr.Code == "57014" || pgErr.Code == "55P03") || errors.Is(err, context.DeadlineExceeded) {
		return ReasonTooSlow
	}
	if errors.As(err, &pgErr) && pgErr.Code == "25006" {
		return ReasonReadOnly
	}
	return ReasonUnreachable
}
