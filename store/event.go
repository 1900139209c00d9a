package store

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/converge-run/converge"
)

// eventColumns is the column list scanEvent reads, in order. An event's
// status is its latest run's.
const eventColumns = `e.id, e.kind, e.resource, e.version, e.payload,
	coalesce((SELECT lr.status FROM converge_runs lr WHERE lr.event_id = e.id ORDER BY lr.number DESC LIMIT 1), 'queued'),
	e.received_at, e.workflow_run_id`

func scanEvent(row pgx.Row) (*converge.Event, error) {
	var e converge.Event
	if err := row.Scan(&e.ID, &e.Kind, &e.Resource, &e.Version, &e.Payload, &e.Status, &e.ReceivedAt, &e.WorkflowRunID); err != nil {
		return nil, err
	}
	e.ReceivedAt = e.ReceivedAt.UTC()
	return &e, nil
}

// EventGet returns one event with its runs (oldest first), each with its
// attempt history.
func (s *Store) EventGet(ctx context.Context, id uuid.UUID) (*converge.Event, error) {
	return s.eventGet(ctx, s.db, id, true)
}

func (s *Store) eventGet(ctx context.Context, q querier, id uuid.UUID, withRuns bool) (*converge.Event, error) {
	ev, err := scanEvent(q.QueryRow(ctx, `SELECT `+eventColumns+` FROM converge_events e WHERE e.id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, converge.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get event %s: %w", id, err)
	}
	if !withRuns {
		return ev, nil
	}
	rows, err := q.Query(ctx, `SELECT `+runColumns+` FROM converge_runs r WHERE r.event_id = $1 ORDER BY r.number`, id)
	if err != nil {
		return nil, fmt.Errorf("list runs: %w", err)
	}
	runs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*converge.Run, error) { return scanRun(row) })
	if err != nil {
		return nil, fmt.Errorf("list runs: %w", err)
	}
	if err := s.attachAttempts(ctx, q, runs); err != nil {
		return nil, err
	}
	ev.Runs = runs
	return ev, nil
}

// EventList returns events newest first and the cursor of the next page
// (nil on the last page).
func (s *Store) EventList(ctx context.Context, p converge.EventListParams) ([]*converge.Event, *uuid.UUID, error) {
	sql := `SELECT ` + eventColumns + ` FROM converge_events e
		WHERE ($1 = '' OR e.kind = $1) AND ($2 = '' OR e.resource = $2)
		  AND ($3 = '' OR (SELECT lr.status FROM converge_runs lr WHERE lr.event_id = e.id ORDER BY lr.number DESC LIMIT 1) = $3)
		  AND ($4::uuid IS NULL OR e.id < $4)
		ORDER BY e.id DESC LIMIT $5`
	if walk := unsettledRuns(p.Status); walk != "" {
		// Few runs are in this status: walk them (the partial indexes
		// converge_runs_unfinished_event and converge_runs_unsettled_event)
		// and keep those that are their event's latest run. The status is
		// one of a fixed set, written into the query so that the planner
		// can use the partial index.
		sql = `SELECT ` + eventColumns + ` FROM converge_runs r JOIN converge_events e ON e.id = r.event_id
		WHERE ` + walk + ` AND $3 <> ''
		  AND NOT EXISTS (SELECT 1 FROM converge_runs n WHERE n.event_id = r.event_id AND n.number > r.number)
		  AND ($1 = '' OR r.kind = $1) AND ($2 = '' OR r.resource = $2)
		  AND ($4::uuid IS NULL OR r.event_id < $4)
		ORDER BY r.event_id DESC LIMIT $5`
	}
	rows, err := s.db.Query(ctx, sql, p.Kind, p.Resource, string(p.Status), p.Cursor, p.Limit+1)
	if err != nil {
		return nil, nil, fmt.Errorf("list events: %w", err)
	}
	items, next, err := keysetPage(rows, p.Limit, func(row pgx.CollectableRow) (*converge.Event, error) { return scanEvent(row) },
		func(e *converge.Event) uuid.UUID { return e.ID })
	if err != nil {
		return nil, nil, fmt.Errorf("list events: %w", err)
	}
	return items, next, nil
}

// unsettledRuns is the condition on runs aliased r that are in status st
// and that a partial index walks in event order, or "" when st is not such
// a status (succeeded and superseded, which most runs end in, and unknown
// ones). An unfinished status is found among the unfinished runs
// (converge_runs_unfinished_event, at most one run per stream), failed and
// cancelled by end_status (converge_runs_unsettled_event); migration 000013.
func unsettledRuns(st converge.RunStatus) string {
	switch {
	case slices.Contains(unfinished, st):
		return `r.finished_at IS NULL AND r.status = '` + string(st) + `'`
	case slices.Contains(unsettledEnded, st):
		return `r.end_status = '` + string(st) + `'`
	}
	return ""
}
