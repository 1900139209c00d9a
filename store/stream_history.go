package store

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/converge-run/converge"
)

// StreamHistoryParams pages the history of one stream by version.
type StreamHistoryParams struct {
	Kind     string
	Resource string
	// Before lists only events with a version below it; 0 starts at the
	// newest.
	Before int64
	Limit  int
}

// StreamHistory is a page of one stream's events, newest first, each with
// every run (oldest first) and each run's attempts.
type StreamHistory struct {
	Stream *converge.Stream
	Events []*converge.Event
	// NextBefore is the cursor of the next (older) page, 0 on the last.
	NextBefore int64
}

// StreamHistoryGet returns a page of a stream's history, or ErrNotFound for
// a stream that never had an event.
func (s *Store) StreamHistoryGet(ctx context.Context, p StreamHistoryParams) (*StreamHistory, error) {
	st, err := s.StreamGet(ctx, p.Kind, p.Resource)
	if err != nil {
		return nil, err
	}
	h := &StreamHistory{Stream: st}
	rows, err := s.db.Query(ctx, `SELECT `+eventColumns+` FROM converge_events e
		WHERE e.kind = $1 AND e.resource = $2 AND ($3 = 0 OR e.version < $3)
		ORDER BY e.version DESC LIMIT $4`, p.Kind, p.Resource, p.Before, p.Limit+1)
	if err != nil {
		return nil, fmt.Errorf("list events of %s/%s: %w", p.Kind, p.Resource, err)
	}
	h.Events, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (*converge.Event, error) { return scanEvent(row) })
	if err != nil {
		return nil, fmt.Errorf("list events of %s/%s: %w", p.Kind, p.Resource, err)
	}
	if len(h.Events) > p.Limit {
		h.Events = h.Events[:p.Limit]
		h.NextBefore = h.Events[len(h.Events)-1].Version
	}
	if len(h.Events) == 0 {
		return h, nil
	}
	ids := make([]uuid.UUID, len(h.Events))
	byID := make(map[uuid.UUID]*converge.Event, len(h.Events))
	for i, e := range h.Events {
		ids[i] = e.ID
		byID[e.ID] = e
	}
	rows, err = s.db.Query(ctx, `SELECT `+runColumns+` FROM converge_runs r WHERE r.event_id = ANY($1) ORDER BY r.event_id, r.number`, ids)
	if err != nil {
		return nil, fmt.Errorf("list runs of %s/%s: %w", p.Kind, p.Resource, err)
	}
	runs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*converge.Run, error) { return scanRun(row) })
	if err != nil {
		return nil, fmt.Errorf("list runs of %s/%s: %w", p.Kind, p.Resource, err)
	}
	if err := s.attachAttempts(ctx, s.db, runs); err != nil {
		return nil, err
	}
	for _, r := range runs {
		e := byID[r.EventID]
		e.Runs = append(e.Runs, r)
	}
	return h, nil
}
