package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/converge-run/converge"
)

// quarantineListMax is how many quarantined streams QuarantineList returns
// at most (the dashboard's overview).
const quarantineListMax = 1000

// QuarantinePage returns a page of the quarantined streams with their held
// runs, newest first by (since, kind, resource), and the cursor of the next
// page (nil on the last page).
func (s *Store) QuarantinePage(ctx context.Context, p converge.QuarantineListParams) ([]*converge.Quarantine, *converge.QuarantineCursor, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = 50
	}
	var since any
	var kind, resource string
	if p.Cursor != nil {
		since, kind, resource = p.Cursor.Since, p.Cursor.Kind, p.Cursor.Resource
	}
	// The row comparison orders the kind and the resource as the ORDER BY
	// does (COLLATE "C", the lock order).
	rows, err := s.db.Query(ctx, `SELECT s.kind, s.resource, s.quarantined_at, s.failed_streak,
			(SELECT r.id FROM converge_runs r WHERE r.kind = s.kind AND r.resource = s.resource AND r.finished_at IS NULL AND r.status = 'held')
		FROM converge_streams s WHERE s.quarantined_at IS NOT NULL
			AND ($1::timestamptz IS NULL OR (s.quarantined_at, s.kind COLLATE "C", s.resource COLLATE "C") < ($1::timestamptz, $2 COLLATE "C", $3 COLLATE "C"))
		ORDER BY s.quarantined_at DESC, s.kind COLLATE "C" DESC, s.resource COLLATE "C" DESC LIMIT $4`,
		since, kind, resource, limit+1)
	if err != nil {
		return nil, nil, fmt.Errorf("list quarantined streams: %w", err)
	}
	items, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*converge.Quarantine, error) {
		var q converge.Quarantine
		err := row.Scan(&q.Kind, &q.Resource, &q.Since, &q.FailedRuns, &q.HeldRunID)
		q.Since = q.Since.UTC()
		return &q, err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("list quarantined streams: %w", err)
	}
	var next *converge.QuarantineCursor
	if len(items) > limit {
		items = items[:limit]
		last := items[len(items)-1]
		next = &converge.QuarantineCursor{Since: last.Since, Kind: last.Kind, Resource: last.Resource}
	}
	return items, next, nil
}

// QuarantineList returns the quarantined streams (up to 1000), newest
// first, with their held runs: the dashboard's overview.
func (s *Store) QuarantineList(ctx context.Context) ([]*converge.Quarantine, error) {
	items, _, err := s.QuarantinePage(ctx, converge.QuarantineListParams{Limit: quarantineListMax})
	return items, err
}
