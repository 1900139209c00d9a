package invariant

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// snapshot is what Check reads from the database, in one repeatable-read
// transaction so that the tables agree with each other.
type snapshot struct {
	streams     map[string]*dbStream
	events      []*dbEvent
	runs        map[uuid.UUID]*dbRun
	attempts    map[attemptKey]*dbAttempt
	deadLetters []*dbDeadLetter
	// workflowRuns are the workflow runs with their steps; eventWorkflow
	// maps each event of a workflow step to its workflow run.
	workflowRuns  map[uuid.UUID]*dbWorkflowRun
	eventWorkflow map[uuid.UUID]uuid.UUID
	// runCounts are converge_run_counts' terminal runs by {kind, status},
	// its rows of deltas summed (the pairs of sum 0 left out); nil when the
	// schema has no such table.
	runCounts map[[2]string]int64
}

type dbStream struct {
	kind, resource string
	latest         int64
	applied        *int64
}

type dbEvent struct {
	id             uuid.UUID
	kind, resource string
	version        int64
	receivedAt     time.Time
}

func (e *dbEvent) stream() string { return e.kind + " " + e.resource }

func (e *dbEvent) String() string { return fmt.Sprintf("%s@%d(%s)", e.stream(), e.version, e.id) }

type dbRun struct {
	id, eventID    uuid.UUID
	number         int
	kind, resource string
	version        int64
	status         string
	attempts       int
	maxAttempts    int
	createdAt      time.Time
	finishedAt     *time.Time
	// hold is what holds the run (SPEC §11): not empty while it is held,
	// and kept when it ended superseded or cancelled while held.
	hold  []string
	jobID *int64
}

func (r *dbRun) stream() string { return r.kind + " " + r.resource }

type attemptKey struct {
	runID  uuid.UUID
	number int
}

type dbAttempt struct {
	runID      uuid.UUID
	number     int
	outcome    *string
	startedAt  time.Time
	finishedAt *time.Time
}

func (a *dbAttempt) outcomeString() string {
	if a.outcome == nil {
		return "open"
	}
	return *a.outcome
}

type dbDeadLetter struct {
	id, runID      uuid.UUID
	kind, resource string
	version        int64
}

func (d *dbDeadLetter) stream() string { return d.kind + " " + d.resource }

type eventKey struct {
	kind, resource string
	version        int64
}

func (k eventKey) stream() string { return k.kind + " " + k.resource }

func load(ctx context.Context, pool *pgxpool.Pool) (*snapshot, error) {
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, fmt.Errorf("read database: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	s := &snapshot{streams: map[string]*dbStream{}, runs: map[uuid.UUID]*dbRun{}, attempts: map[attemptKey]*dbAttempt{}}

	rows, err := tx.Query(ctx, `SELECT kind, resource, latest_version, applied_version FROM converge_streams`)
	if err != nil {
		return nil, fmt.Errorf("read streams: %w", err)
	}
	var st dbStream
	_, err = pgx.ForEachRow(rows, []any{&st.kind, &st.resource, &st.latest, &st.applied}, func() error {
		v := st
		st.applied = nil // pgx may write through a non-nil pointer
		s.streams[v.kind+" "+v.resource] = &v
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read streams: %w", err)
	}

	rows, err = tx.Query(ctx, `SELECT id, kind, resource, version, received_at FROM converge_events ORDER BY kind, resource, version`)
	if err != nil {
		return nil, fmt.Errorf("read events: %w", err)
	}
	var ev dbEvent
	_, err = pgx.ForEachRow(rows, []any{&ev.id, &ev.kind, &ev.resource, &ev.version, &ev.receivedAt}, func() error {
		v := ev
		s.events = append(s.events, &v)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read events: %w", err)
	}

	rows, err = tx.Query(ctx, `SELECT id, event_id, number, kind, resource, version, status, attempts, max_attempts, created_at, finished_at,
		hold, job_id FROM converge_runs`)
	if err != nil {
		return nil, fmt.Errorf("read runs: %w", err)
	}
	var run dbRun
	_, err = pgx.ForEachRow(rows, []any{&run.id, &run.eventID, &run.number, &run.kind, &run.resource, &run.version,
		&run.status, &run.attempts, &run.maxAttempts, &run.createdAt, &run.finishedAt, &run.hold, &run.jobID}, func() error {
		v := run
		run.finishedAt, run.hold, run.jobID = nil, nil, nil
		s.runs[v.id] = &v
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read runs: %w", err)
	}

	rows, err = tx.Query(ctx, `SELECT run_id, number, outcome, started_at, finished_at FROM converge_attempts`)
	if err != nil {
		return nil, fmt.Errorf("read attempts: %w", err)
	}
	var a dbAttempt
	_, err = pgx.ForEachRow(rows, []any{&a.runID, &a.number, &a.outcome, &a.startedAt, &a.finishedAt}, func() error {
		v := a
		a.outcome, a.finishedAt = nil, nil
		s.attempts[attemptKey{v.runID, v.number}] = &v
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read attempts: %w", err)
	}

	rows, err = tx.Query(ctx, `SELECT id, run_id, kind, resource, version FROM converge_dead_letters`)
	if err != nil {
		return nil, fmt.Errorf("read dead letters: %w", err)
	}
	var d dbDeadLetter
	_, err = pgx.ForEachRow(rows, []any{&d.id, &d.runID, &d.kind, &d.resource, &d.version}, func() error {
		v := d
		s.deadLetters = append(s.deadLetters, &v)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read dead letters: %w", err)
	}
	if err := loadWorkflows(ctx, tx, s); err != nil {
		return nil, err
	}
	if err := loadRunCounts(ctx, tx, s); err != nil {
		return nil, err
	}
	return s, nil
}
