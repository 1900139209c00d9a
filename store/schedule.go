package store

import (
	"context"
	"fmt"
)

// JobsPromote makes the scheduled jobs of queues whose time has come
// available, as River's scheduler does, and returns how many. River's
// scheduler runs every five seconds; converge schedules jobs for shorter
// delays (a debounced run's first attempt, retries after a backoff of more
// than five seconds), which would start up to five seconds late otherwise.
// Only converge's own job kind is touched, and the jobs have no unique
// options, so the update needs none of River's unique-state handling.
func (s *Store) JobsPromote(ctx context.Context, queues []string) (int64, error) {
	tag, err := s.pool.Exec(ctx, `UPDATE river_job SET state = 'available'
		WHERE id IN (
			SELECT id FROM river_job
			WHERE state = 'scheduled' AND queue = ANY($1) AND scheduled_at <= now() AND kind = $2
			ORDER BY scheduled_at LIMIT 1000 FOR UPDATE SKIP LOCKED)
		  AND state = 'scheduled'`, queues, RunArgs{}.Kind())
	if err != nil {
		return 0, fmt.Errorf("promote scheduled jobs: %w", err)
	}
	return tag.RowsAffected(), nil
}
