package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/converge-run/converge"
)

// AttemptHeartbeat renews the lease of an attempt in flight. It reports
// alive false when the call must stop: the run was superseded or
// cancelled, or the lease was lost. On success, from is a moment of this
// process's clock no later than the renewal's now(): the lease now lasts at
// least leaseTTL from it.
func (s *Store) AttemptHeartbeat(ctx context.Context, run *converge.Run, attempt int, leaseTTL time.Duration) (alive bool, from time.Time, err error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return true, time.Time{}, fmt.Errorf("renew lease of run %s: acquire connection: %w", run.ID, err)
	}
	defer conn.Release()
	from = time.Now()
	var status converge.RunStatus
	err = conn.QueryRow(ctx, `UPDATE converge_streams SET lease_expires_at = now() + $5 * interval '1 microsecond'
		WHERE kind = $1 AND resource = $2 AND lease_run_id = $3 AND lease_attempt = $4
		RETURNING (SELECT status FROM converge_runs WHERE id = $3)`,
		run.Kind, run.Resource, run.ID, attempt, leaseTTL.Microseconds()).Scan(&status)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, from, nil
	}
	if err != nil {
		return true, time.Time{}, fmt.Errorf("renew lease of run %s: %w", run.ID, err)
	}
	return !status.Terminal(), from, nil
}
