package store

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/converge-run/converge"
)

// The data access of reconciling runs whose worker vanished. When and how
// often is jobs.Reconciler's policy; what a stranded run is and how it is
// rescued, under its locks, is here.

// RunRescue gives run id a fresh job if it is still stranded once its
// stream and the run are locked (the lock order everywhere), and reports
// whether it did:
//   - a running run whose stream lease expired or went to another run is
//     set retrying (the next attempt records the lost one abandoned);
//   - a queued or retrying run whose job has been running in River for
//     longer than stuckAfter (as RunStrandedList measures it) keeps its
//     status and scheduled time.
//
// The run's job_id is switched under the run's lock, and AttemptBegin
// ignores any job but the run's current one, so a worker that was only
// slow does nothing when it comes back. The old job is cancelled.
func (s *Store) RunRescue(ctx context.Context, id uuid.UUID, stuckAfter time.Duration) (bool, error) {
	rescued := false
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var kind, resource string
		if err := tx.QueryRow(ctx, `SELECT kind, resource FROM converge_runs WHERE id = $1`, id).Scan(&kind, &resource); err != nil {
			return fmt.Errorf("find run: %w", err)
		}
		var leaseLost bool
		err := tx.QueryRow(ctx, lockStreamSQL(`coalesce(s.lease_run_id IS DISTINCT FROM $3 OR s.lease_expires_at < now(), true)`),
			kind, resource, id).Scan(&leaseLost)
		if err != nil {
			return fmt.Errorf("lock stream: %w", err)
		}
		var status converge.RunStatus
		var oldJob *int64
		var nextAttempt *time.Time
		if err := tx.QueryRow(ctx, `SELECT status, job_id, next_attempt_at FROM converge_runs WHERE id = $1 FOR UPDATE`, id).
			Scan(&status, &oldJob, &nextAttempt); err != nil {
			return fmt.Errorf("lock run: %w", err)
		}
		var scheduled time.Time
		switch status {
		case converge.RunRunning:
			if !leaseLost {
				return nil
			}
			if err := execAll(ctx, tx, leaseReleaseStmt(kind, resource, id)); err != nil {
				return err
			}
			status, nextAttempt = converge.RunRetrying, nil
		case converge.RunQueued, converge.RunRetrying:
			if oldJob == nil {
				return nil
			}
			stuck, err := jobStuck(ctx, tx, *oldJob, stuckAfter)
			if err != nil || !stuck {
				return err
			}
			// Keep the backoff the lost worker had scheduled.
			if nextAttempt != nil {
				scheduled = *nextAttempt
			}
		default:
			return nil
		}
		job, err := s.jobInsertAt(ctx, tx, id, kind, scheduled)
		if err != nil {
			return fmt.Errorf("enqueue rescue: %w", err)
		}
		if _, err := tx.Exec(ctx, `UPDATE converge_runs SET job_id = $2, status = $3, next_attempt_at = coalesce($4, now()) WHERE id = $1`,
			id, job, status, nextAttempt); err != nil {
			return fmt.Errorf("point run at rescue job: %w", err)
		}
		if oldJob != nil {
			if err := s.jobCancel(ctx, tx, *oldJob); err != nil {
				return err
			}
		}
		rescued = true
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("rescue run %s: %w", id, err)
	}
	return rescued, nil
}

// AttemptAbandonOrphans records as abandoned the open attempts of finished
// runs whose worker vanished (their stream's lease went elsewhere or
// expired).
func (s *Store) AttemptAbandonOrphans(ctx context.Context) error {
	_, err := s.db.Exec(ctx, `UPDATE converge_attempts a SET `+fmt.Sprintf(attemptCloseSet, "'abandoned'", "$1")+`
		FROM converge_runs r JOIN converge_streams s ON s.kind = r.kind AND s.resource = r.resource
		WHERE a.run_id = r.id AND a.outcome IS NULL AND r.status IN `+terminalSQL+`
		  AND (s.lease_run_id IS DISTINCT FROM r.id OR s.lease_expires_at < now())`, abandonedError)
	if err != nil {
		return fmt.Errorf("record abandoned attempts: %w", err)
	}
	return nil
}
