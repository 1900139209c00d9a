package store

import (
	"context"
	"errors"
	"fmt"

	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/converge-run/converge"
)

// runColumns is the column list scanRun reads, in order.
const runColumns = `r.id, r.event_id, r.number, r.status, r.attempts, r.max_attempts, r.next_attempt_at,
	r.created_at, r.started_at, r.finished_at, r.error, r.output, r.kind, r.resource, r.version, r.workflow_run_id, r.hold,
	r.trace_parent, r.trace_link`

func scanRun(row pgx.Row) (*converge.Run, error) {
	return scanRunWith(row)
}

// scanRunWith is scanRun reading extra columns after runColumns.
func scanRunWith(row pgx.Row, extra ...any) (*converge.Run, error) {
	return newRunScanner(extra...).scan(row)
}

// runScanner reads rows of runColumns (then extra columns) into new Runs.
// One scanner serves all the rows of a result: its destination list is
// built once, not per row.
type runScanner struct {
	r                      converge.Run
	output                 []byte
	traceParent, traceLink *string
	dest                   []any
}

func newRunScanner(extra ...any) *runScanner {
	s := &runScanner{}
	r := &s.r
	s.dest = append([]any{uuidDest(&r.ID), uuidDest(&r.EventID), &r.Number, &r.Status, &r.Attempts, &r.MaxAttempts, &r.NextAttemptAt,
		&r.CreatedAt, &r.StartedAt, &r.FinishedAt, &r.Error, &s.output, &r.Kind, &r.Resource, &r.Version, &r.WorkflowRunID, &r.Hold,
		&s.traceParent, &s.traceLink}, extra...)
	return s
}

// scan reads row into a new Run (and the scanner's extra destinations).
func (s *runScanner) scan(row pgx.Row) (*converge.Run, error) {
	s.r, s.output, s.traceParent, s.traceLink = converge.Run{}, nil, nil, nil
	if err := row.Scan(s.dest...); err != nil {
		return nil, err
	}
	r := new(converge.Run)
	*r = s.r
	if s.traceParent != nil {
		r.TraceParent = *s.traceParent
	}
	if s.traceLink != nil {
		r.TraceLink = *s.traceLink
	}
	if s.output != nil {
		r.Output = s.output
	}
	utcRun(r)
	return r, nil
}

// utcRun completes a Run just scanned: its times in UTC (in place: the
// scan allocated them for this Run), its trace id, a non-nil Hold.
func utcRun(r *converge.Run) {
	if id := converge.TraceIDOf(r.TraceParent); id != "" {
		r.TraceID = &id
	}
	if r.Hold == nil {
		r.Hold = []string{}
	}
	r.CreatedAt = r.CreatedAt.UTC()
	for _, t := range []**time.Time{&r.NextAttemptAt, &r.StartedAt, &r.FinishedAt} {
		if *t != nil {
			**t = (*t).UTC()
		}
	}
}

// RunGet returns one run with its attempt history.
func (s *Store) RunGet(ctx context.Context, id uuid.UUID) (*converge.Run, error) {
	r, err := scanRun(s.db.QueryRow(ctx, `SELECT `+runColumns+` FROM converge_runs r WHERE r.id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, converge.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get run %s: %w", id, err)
	}
	if err := s.attachAttempts(ctx, s.db, []*converge.Run{r}); err != nil {
		return nil, err
	}
	return r, nil
}

// RunCancel ends an unfinished run as cancelled on an operator's request and
// cancels its job; a running attempt's worker notices and stops the call.
// It returns ErrRunFinished for a terminal run.
func (s *Store) RunCancel(ctx context.Context, id uuid.UUID, audit converge.AuditEntry) (*converge.Run, error) {
	var run *converge.Run
	var wfs []workflowStatus
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		wfs = nil
		var status converge.RunStatus
		var jobID *int64
		err := tx.QueryRow(ctx, `SELECT status, job_id FROM converge_runs WHERE id = $1 FOR UPDATE`, id).Scan(&status, &jobID)
		if errors.Is(err, pgx.ErrNoRows) {
			return converge.ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("lock run: %w", err)
		}
		if status.Terminal() {
			return ErrRunFinished
		}
		run, err = scanRun(tx.QueryRow(ctx, `UPDATE converge_runs r SET status = 'cancelled', finished_at = now(), next_attempt_at = NULL
			WHERE id = $1 RETURNING `+runColumns, id))
		if err != nil {
			return fmt.Errorf("cancel run: %w", err)
		}
		if jobID != nil {
			if err := s.jobCancel(ctx, tx, *jobID); err != nil {
				return err
			}
		}
		audit.Action = "run.cancel"
		audit.Targets = []string{id.String()}
		if err := auditInsert(ctx, tx, audit); err != nil || run.WorkflowRunID == nil {
			return err
		}
		// A cancelled step cancels its workflow run.
		wfs, err = s.workflowStatusesTx(ctx, tx)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("cancel run %s: %w", id, err)
	}
	s.reportWorkflowStatuses(wfs)
	if err := s.attachAttempts(ctx, s.db, []*converge.Run{run}); err != nil {
		return nil, err
	}
	return run, nil
}

// querier is what both a pool and a transaction can do.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// attachAttempts fills AttemptHistory of each run, oldest attempt first.
func (s *Store) attachAttempts(ctx context.Context, q querier, runs []*converge.Run) error {
	if len(runs) == 0 {
		return nil
	}
	ids := make([]uuid.UUID, len(runs))
	byID := make(map[uuid.UUID]*converge.Run, len(runs))
	for i, r := range runs {
		ids[i] = r.ID
		byID[r.ID] = r
		r.AttemptHistory = []*converge.Attempt{}
	}
	rows, err := q.Query(ctx, `SELECT run_id, number, coalesce(outcome, ''), started_at, finished_at, duration_ms, error
		FROM converge_attempts WHERE run_id = ANY($1) ORDER BY run_id, number`, ids)
	if err != nil {
		return fmt.Errorf("list attempts: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var runID uuid.UUID
		var a converge.Attempt
		if err := rows.Scan(&runID, &a.Number, &a.Outcome, &a.StartedAt, &a.FinishedAt, &a.DurationMS, &a.Error); err != nil {
			return fmt.Errorf("scan attempt: %w", err)
		}
		a.StartedAt = a.StartedAt.UTC()
		if a.FinishedAt != nil {
			v := a.FinishedAt.UTC()
			a.FinishedAt = &v
		}
		r := byID[runID]
		r.AttemptHistory = append(r.AttemptHistory, &a)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("list attempts: %w", err)
	}
	return nil
}
