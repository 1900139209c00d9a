package store

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// RunEndedList returns those of the runs ids that have ended (succeeded,
// failed, superseded or cancelled), in one query. A worker process asks it
// every few hundred milliseconds about the runs it is calling targets for,
// so that a superseded or cancelled run's call is stopped within a second
// even when the notification that cancels its job is lost (SPEC §15).
func (s *Store) RunEndedList(ctx context.Context, ids []uuid.UUID) ([]uuid.UUID, error) {
	rows, err := s.db.Query(ctx, `SELECT id FROM converge_runs WHERE id = ANY($1) AND status IN `+terminalSQL, uuids(ids))
	if err != nil {
		return nil, fmt.Errorf("list ended runs: %w", err)
	}
	ended, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return nil, fmt.Errorf("list ended runs: %w", err)
	}
	return ended, nil
}
