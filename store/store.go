package store

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/converge-run/converge"
)

// Store is converge's database: plain data access, built in one step,
// starting no goroutine. It calls River's *Tx functions so that a job is
// enqueued or cancelled in the same transaction as converge's rows
// (riverjob.go).
type Store struct {
	pool *pgxpool.Pool
	// db runs the statements sent outside a transaction of the store's:
	// the pool, or with TransactionTimeouts each in a transaction of its
	// own that sets the timeouts (timedStatements).
	db    statementRunner
	river *river.Client[pgx.Tx]
	// routes are the receivers of notifications (notification.go).
	routes []converge.NotifyRoute
	// txOptions begin every transaction; with TransactionTimeouts their
	// BeginQuery sets the timeouts of the transaction alone.
	txOptions pgx.TxOptions
	// workflowObserver is told the workflow run statuses each committed
	// transaction entered (ObserveWorkflowRuns); nil: not read.
	workflowObserver func(workflow, status string)
	// acceptObserver is told the steps accepted and the runs superseded
	// by each committed transaction (ObserveAccepts).
	acceptObserver AcceptObserver
	// schema is what Unavailable learnt of the schema (unavailable.go).
	schema schemaState
}

// Option configures a Store.
type Option func(*Store)

// TransactionTimeouts makes every transaction of the store set
// statement_timeout and lock_timeout for itself alone, in its BEGIN
// (set_config(..., true)): the way to bound statements through a pooler in
// transaction mode, where no session setting may stay on a server
// connection (SPEC §15). A zero duration leaves its setting alone.
func TransactionTimeouts(statementTimeout, lockTimeout time.Duration) Option {
	return func(s *Store) {
		var sets []string
		if statementTimeout > 0 {
			sets = append(sets, fmt.Sprintf("set_config('statement_timeout', '%dms', true)", statementTimeout.Milliseconds()))
		}
		if lockTimeout > 0 {
			sets = append(sets, fmt.Sprintf("set_config('lock_timeout', '%dms', true)", lockTimeout.Milliseconds()))
		}
		if len(sets) > 0 {
			s.txOptions.BeginQuery = "BEGIN; SELECT " + strings.Join(sets, ", ")
		}
	}
}

// New returns a Store on pool that enqueues and cancels run jobs with rc.
// An insert-only River client (no workers, never started) is enough; the
// worker's client works as well.
func New(pool *pgxpool.Pool, rc *river.Client[pgx.Tx], opts ...Option) *Store {
	s := &Store{pool: pool, river: rc}
	for _, o := range opts {
		o(s)
	}
	s.db = pool
	if s.txOptions.BeginQuery != "" {
		s.db = &timedStatements{pool: pool, opts: s.txOptions}
	}
	return s
}

// Pool returns the connection pool.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	return s.pool.Ping(ctx)
}

// inTx runs fn in a transaction and commits it when fn returns nil. An
// error that says the database is unavailable is returned as
// converge.EUNAVAILABLE (Store.Unavailable).
func (s *Store) inTx(ctx context.Context, fn func(pgx.Tx) error) error {
	return s.Unavailable(ctx, s.runTx(ctx, fn))
}

func (s *Store) runTx(ctx context.Context, fn func(pgx.Tx) error) error {
	tx, err := s.pool.BeginTx(ctx, s.txOptions)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// txRetries is how many times inTxRetry runs a transaction that
// PostgreSQL aborted as a deadlock's victim or for a serialization failure.
const txRetries = 5

// inTxRetry is inTx that runs fn again, in a new transaction, when the
// transaction failed with a deadlock (40P01) or a serialization failure
// (40001): PostgreSQL rolled it back as a whole, so running it again is
// safe. fn must keep no state of an earlier try. It is for transactions
// that lock rows outside the one lock order: a workflow step's finish
// locks its stream, then accepts the next steps on other streams (and the
// supersessions these cause lock other workflow runs), so two finishes of
// workflow runs that meet streams in opposite orders can deadlock.
func (s *Store) inTxRetry(ctx context.Context, fn func(pgx.Tx) error) error {
	for try := 1; ; try++ {
		err := s.inTx(ctx, fn)
		if err == nil || try == txRetries || !IsRetryableTx(err) {
			return err
		}
		// A short random pause lets the other transaction finish first.
		select {
		case <-time.After(time.Duration(try) * time.Duration(5+rand.N(20)) * time.Millisecond):
		case <-ctx.Done():
			return err
		}
	}
}

// IsRetryableTx reports whether err is PostgreSQL aborting a transaction
// that may succeed when run again: a deadlock (40P01) or a serialization
// failure (40001).
func IsRetryableTx(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "40P01" || pgErr.Code == "40001")
}

// ErrRunFinished is returned when a change is asked of a terminal run; the
// database's one-shot trigger raises SQLSTATE CV006 for the same reason.
var ErrRunFinished = &converge.AppError{Code: converge.ERUNFINISHED, Message: "run is already finished"}

func newID() uuid.UUID {
	id, err := uuid.NewV7()
	if err != nil {
		return uuid.New()
	}
	return id
}

// inTxFrom is inTx that sets *from to this process's clock just before the
// transaction's BEGIN is sent, after a connection was acquired: the
// transaction's now() is no earlier.
func (s *Store) inTxFrom(ctx context.Context, from *time.Time, fn func(pgx.Tx) error) error {
	return s.Unavailable(ctx, s.runTxFrom(ctx, from, fn))
}

func (s *Store) runTxFrom(ctx context.Context, from *time.Time, fn func(pgx.Tx) error) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("acquire connection: %w", err)
	}
	defer conn.Release()
	*from = time.Now()
	tx, err := conn.BeginTx(ctx, s.txOptions)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}
