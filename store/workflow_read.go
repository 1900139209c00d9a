package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/converge-run/converge"
)

// workflowRunColumns is the column list scanWorkflowRun reads, in order.
const workflowRunColumns = `w.id, w.workflow, w.resource, w.version, w.status, w.payload, w.created_at, w.finished_at,
	coalesce(w.trace_parent, '')`

func scanWorkflowRun(row pgx.Row) (*converge.WorkflowRun, error) {
	var w converge.WorkflowRun
	var traceParent string
	if err := row.Scan(&w.ID, &w.Workflow, &w.Resource, &w.Version, &w.Status, &w.Payload, &w.CreatedAt, &w.FinishedAt, &traceParent); err != nil {
		return nil, err
	}
	if id := converge.TraceIDOf(traceParent); id != "" {
		w.TraceID = &id
	}
	w.CreatedAt = w.CreatedAt.UTC()
	if w.FinishedAt != nil {
		t := w.FinishedAt.UTC()
		w.FinishedAt = &t
	}
	return &w, nil
}

// workflowStepsSQL lists the steps of the workflow runs $1 in their
// workflow's order, each with its status: its own state until its event is
// accepted, then the status of its run; and the latest dead letter of that
// run or an earlier one of its event. A step's run is its event's latest,
// or, once the workflow run has ended, the one it had then (final_run,
// migration 000019): a redrive after the end makes a run the final
// workflow run does not show.
const workflowStepsSQL = `SELECT st.workflow_run_id, st.name, st.kind, st.resource, st.needs, st.event_id,
		CASE WHEN st.state = 'accepted' THEN coalesce(lr.status, 'queued') ELSE st.state END,
		lr.id,
		(SELECT d.id FROM converge_dead_letters d JOIN converge_runs dr ON dr.id = d.run_id
		  WHERE d.event_id = st.event_id AND (st.final_run IS NULL OR dr.number <= st.final_run) ORDER BY d.id DESC LIMIT 1)
	FROM converge_workflow_steps st
	LEFT JOIN LATERAL (SELECT r.id, r.status FROM converge_runs r WHERE r.event_id = st.event_id
	                   AND (st.final_run IS NULL OR r.number <= st.final_run)
	                   ORDER BY r.number DESC LIMIT 1) lr ON true
	WHERE st.workflow_run_id = ANY($1)
	ORDER BY st.workflow_run_id, st.position`

// attachWorkflowSteps loads the steps of runs.
func attachWorkflowSteps(ctx context.Context, q querier, runs []*converge.WorkflowRun) error {
	if len(runs) == 0 {
		return nil
	}
	byID := make(map[uuid.UUID]*converge.WorkflowRun, len(runs))
	ids := make([]uuid.UUID, 0, len(runs))
	for _, w := range runs {
		byID[w.ID] = w
		ids = append(ids, w.ID)
		w.Steps = []*converge.WorkflowRunStep{}
	}
	rows, err := q.Query(ctx, workflowStepsSQL, ids)
	if err != nil {
		return fmt.Errorf("list workflow steps: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var runID uuid.UUID
		var st converge.WorkflowRunStep
		if err := rows.Scan(&runID, &st.Name, &st.Kind, &st.Resource, &st.Needs, &st.EventID, &st.Status, &st.RunID, &st.DeadLetterID); err != nil {
			return fmt.Errorf("list workflow steps: %w", err)
		}
		if st.Needs == nil {
			st.Needs = []string{}
		}
		byID[runID].Steps = append(byID[runID].Steps, &st)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("list workflow steps: %w", err)
	}
	return nil
}

// WorkflowRunGet returns one workflow run with its steps.
func (s *Store) WorkflowRunGet(ctx context.Context, id uuid.UUID) (*converge.WorkflowRun, error) {
	return workflowRunGet(ctx, s.db, id)
}

func workflowRunGet(ctx context.Context, q querier, id uuid.UUID) (*converge.WorkflowRun, error) {
	w, err := scanWorkflowRun(q.QueryRow(ctx, `SELECT `+workflowRunColumns+` FROM converge_workflow_runs w WHERE w.id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, converge.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get workflow run %s: %w", id, err)
	}
	if err := attachWorkflowSteps(ctx, q, []*converge.WorkflowRun{w}); err != nil {
		return nil, err
	}
	return w, nil
}

// WorkflowRunList returns workflow runs newest first, with their steps,
// and the cursor of the next page (nil on the last page).
func (s *Store) WorkflowRunList(ctx context.Context, p converge.WorkflowRunListParams) ([]*converge.WorkflowRun, *uuid.UUID, error) {
	rows, err := s.db.Query(ctx, `SELECT `+workflowRunColumns+` FROM converge_workflow_runs w
		WHERE ($1 = '' OR w.workflow = $1) AND ($2 = '' OR w.resource = $2) AND ($3 = '' OR w.status = $3)
		  AND ($4::uuid IS NULL OR w.id < $4)
		ORDER BY w.id DESC LIMIT $5`, p.Workflow, p.Resource, string(p.Status), p.Cursor, p.Limit+1)
	if err != nil {
		return nil, nil, fmt.Errorf("list workflow runs: %w", err)
	}
	items, next, err := keysetPage(rows, p.Limit, func(row pgx.CollectableRow) (*converge.WorkflowRun, error) { return scanWorkflowRun(row) },
		func(w *converge.WorkflowRun) uuid.UUID { return w.ID })
	if err != nil {
		return nil, nil, fmt.Errorf("list workflow runs: %w", err)
	}
	if err := attachWorkflowSteps(ctx, s.db, items); err != nil {
		return nil, nil, err
	}
	return items, next, nil
}
