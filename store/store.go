package store

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/converge-run/converge"
)

// RunArgs is the River job that drives one run. The job carries only the
// run's id; everything else is read from our tables when it is worked.
type RunArgs struct {
	RunID uuid.UUID `json:"run_id"`
}

// Kind implements river.JobArgs.
func (RunArgs) Kind() string { return "converge_run" }

// riverMaxAttempts is the River-level attempt ceiling of a run's job. River
// never decides that a run has failed: our attempt count does, and snoozes
// (waits for the lease, backoff) do not count with River either.
const riverMaxAttempts = 100_000

// Store is converge's database.
type Store struct {
	pool     *pgxpool.Pool
	river    *river.Client[pgx.Tx]
	accepts  *batcher[EventAcceptParams, *converge.EventAcceptResult]
	finishes *batcher[AttemptFinishParams, *AttemptFinishResult]
	begins   *batcher[beginRequest, *AttemptTicket]
	// later counts the AttemptFinishLater calls not yet recorded.
	later sync.WaitGroup
}

// New returns a Store on pool. SetRiver must be called before anything that
// enqueues or cancels jobs.
func New(pool *pgxpool.Pool) *Store {
	s := &Store{pool: pool}
	s.accepts = &batcher[EventAcceptParams, *converge.EventAcceptResult]{
		maxRunning: batchesInFlight, maxBatch: maxBatch,
		key: func(p EventAcceptParams) string { return p.Kind + "\x00" + p.Resource },
		run: s.acceptBatch,
	}
	s.finishes = &batcher[AttemptFinishParams, *AttemptFinishResult]{
		maxRunning: batchesInFlight, maxBatch: maxBatch,
		key: func(p AttemptFinishParams) string { return p.Run.Kind + "\x00" + p.Run.Resource },
		run: s.finishBatch,
	}
	// A begin's stream is known only once its run is read, so its batch
	// key is the run; beginBatch begins a second run of a stream on its own.
	s.begins = &batcher[beginRequest, *AttemptTicket]{
		maxRunning: batchesInFlight, maxBatch: maxBatch,
		key: func(r beginRequest) string { return string(r.runID[:]) },
		run: s.beginBatch,
	}
	return s
}

// SetRiver gives the store the River client it enqueues and cancels jobs
// with. An insert-only client (no workers) is enough for API processes.
func (s *Store) SetRiver(c *river.Client[pgx.Tx]) { s.river = c }

// Pool returns the connection pool.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	return s.pool.Ping(ctx)
}

// inTx runs fn in a transaction and commits it when fn returns nil.
func (s *Store) inTx(ctx context.Context, fn func(pgx.Tx) error) error {
	tx, err := s.pool.Begin(ctx)
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

// ErrRunFinished is returned when a change is asked of a terminal run; the
// database's one-shot trigger raises SQLSTATE CV006 for the same reason.
var ErrRunFinished = &converge.AppError{Code: converge.ERUNFINISHED, Message: "run is already finished"}

// IsOneShotViolation reports whether err is the database refusing to change
// a terminal run (G6).
func IsOneShotViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "CV006"
}

func newID() uuid.UUID {
	id, err := uuid.NewV7()
	if err != nil {
		return uuid.New()
	}
	return id
}

func isRiverNotFound(err error) bool {
	return errors.Is(err, river.ErrNotFound)
}
