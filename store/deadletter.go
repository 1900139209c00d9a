package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/converge-run/converge"
)

// deadLetterColumns is the column list scanDeadLetter reads, in order.
const deadLetterColumns = `d.id, d.event_id, d.run_id, d.kind, d.resource, d.version, d.reason, d.attempts,
	d.error, d.errors, d.payload, d.status, d.created_at, d.resolved_at, d.resolved_by, d.superseded_by_version`

// scanDeadLetter reads deadLetterColumns, then any columns after them into
// extra.
func scanDeadLetter(row pgx.Row, extra ...any) (*converge.DeadLetter, error) {
	var d converge.DeadLetter
	err := row.Scan(append([]any{&d.ID, &d.EventID, &d.RunID, &d.Kind, &d.Resource, &d.Version, &d.Reason, &d.Attempts,
		&d.Error, &d.Errors, &d.Payload, &d.Status, &d.CreatedAt, &d.ResolvedAt, &d.ResolvedBy, &d.SupersededByVersion}, extra...)...)
	if err != nil {
		return nil, err
	}
	d.CreatedAt = d.CreatedAt.UTC()
	if d.ResolvedAt != nil {
		v := d.ResolvedAt.UTC()
		d.ResolvedAt = &v
	}
	if d.Errors == nil {
		d.Errors = []*converge.Error{}
	}
	return &d, nil
}

// DeadLettersOfRuns returns the dead letters of runs, in every status, by
// run id (a run has at most one): those a page of a stream's history shows.
func (s *Store) DeadLettersOfRuns(ctx context.Context, runs []uuid.UUID) (map[uuid.UUID]*converge.DeadLetter, error) {
	out := map[uuid.UUID]*converge.DeadLetter{}
	if len(runs) == 0 {
		return out, nil
	}
	rows, err := s.db.Query(ctx, `SELECT `+deadLetterColumns+` FROM converge_dead_letters d WHERE d.run_id = ANY($1)`, uuids(runs))
	if err != nil {
		return nil, fmt.Errorf("dead letters of runs: %w", err)
	}
	dls, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*converge.DeadLetter, error) { return scanDeadLetter(row) })
	if err != nil {
		return nil, fmt.Errorf("dead letters of runs: %w", err)
	}
	for _, d := range dls {
		out[d.RunID] = d
	}
	return out, nil
}

// DeadLetterGet returns one dead letter, or ErrNotFound.
func (s *Store) DeadLetterGet(ctx context.Context, id uuid.UUID) (*converge.DeadLetter, error) {
	d, err := scanDeadLetter(s.db.QueryRow(ctx, `SELECT `+deadLetterColumns+` FROM converge_dead_letters d WHERE d.id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, converge.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get dead letter %s: %w", id, err)
	}
	return d, nil
}
