package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/converge-run/converge"
)

// StreamGet returns a stream's versions and its unfinished run, if any, or
// ErrNotFound for a stream that never accepted a version: a workflow rule
// with version auto locks the streams of all its steps by writing their
// rows at version 0 (deliveryWorkflow), and a step that is never accepted
// leaves its row so.
func (s *Store) StreamGet(ctx context.Context, kind, resource string) (*converge.Stream, error) {
	st := converge.Stream{Kind: kind, Resource: resource}
	err := s.db.QueryRow(ctx, `SELECT latest_version, applied_version, applied_at, quarantined_at FROM converge_streams
		WHERE kind = $1 AND resource = $2 AND latest_version > 0`, kind, resource).Scan(&st.LatestVersion, &st.AppliedVersion, &st.AppliedAt, &st.QuarantinedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, converge.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get stream %s/%s: %w", kind, resource, err)
	}
	if st.QuarantinedAt != nil {
		v := st.QuarantinedAt.UTC()
		st.QuarantinedAt, st.Quarantined = &v, true
	}
	if st.AppliedAt != nil {
		v := st.AppliedAt.UTC()
		st.AppliedAt = &v
	}
	run, err := scanRun(s.db.QueryRow(ctx, `SELECT `+runColumns+` FROM converge_runs r
		WHERE r.kind = $1 AND r.resource = $2 AND r.finished_at IS NULL`, kind, resource))
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return nil, fmt.Errorf("get active run of %s/%s: %w", kind, resource, err)
	default:
		st.ActiveRun = run
	}
	return &st, nil
}
