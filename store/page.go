package store

import (
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// keysetPage reads a page of a list queried by keyset (newest first by
// id, one row more than limit): it scans each row with scan and returns
// the first limit items and the cursor of the next page, the id of the
// last item returned (nil on the last page).
func keysetPage[T any](rows pgx.Rows, limit int, scan pgx.RowToFunc[T], id func(T) uuid.UUID) ([]T, *uuid.UUID, error) {
	items, err := pgx.CollectRows(rows, scan)
	if err != nil {
		return nil, nil, err
	}
	if len(items) <= limit {
		return items, nil, nil
	}
	items = items[:limit]
	next := id(items[len(items)-1])
	return items, &next, nil
}
