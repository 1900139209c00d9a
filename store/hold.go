package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/converge-run/converge"
)

// Held work (SPEC §11): approving or rejecting a held run, and releasing a
// quarantined stream. Each locks the stream's row, then the run's (the one
// lock order), so an approval racing another approval or a newer version's
// supersession leaves exactly one outcome.

// ErrNotHeld is returned for an approval or rejection of a run that has no
// approval hold (never had one, or is no longer held).
var ErrNotHeld = converge.Errorf(converge.ENOTHELD, "the run is not held for approval")

// heldRun is a run locked by lockHeldRun.
type heldRun struct {
	kind, resource string
	status         converge.RunStatus
	hold           []string
}

// lockHeldRun locks run id's stream, then the run, and reads them.
func lockHeldRun(ctx context.Context, tx pgx.Tx, id uuid.UUID) (*heldRun, error) {
	var h heldRun
	err := tx.QueryRow(ctx, `SELECT kind, resource FROM converge_runs WHERE id = $1`, id).Scan(&h.kind, &h.resource)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, converge.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("find run: %w", err)
	}
	if _, err := tx.Exec(ctx, lockStreamSQL("1"), h.kind, h.resource); err != nil {
		return nil, fmt.Errorf("lock stream: %w", err)
	}
	if err := tx.QueryRow(ctx, `SELECT status, hold FROM converge_runs WHERE id = $1 FOR UPDATE`, id).Scan(&h.status, &h.hold); err != nil {
		return nil, fmt.Errorf("lock run: %w", err)
	}
	return &h, nil
}

// runUnhold removes what from the hold of held run id (its stream and the
// run locked, kind its kind); when nothing holds it any more it becomes
// queued and its job is inserted now.
func (s *Store) runUnhold(ctx context.Context, tx pgx.Tx, id uuid.UUID, kind string, hold []string, what string) (*converge.Run, error) {
	rest := slices.DeleteFunc(slices.Clone(hold), func(h string) bool { return h == what })
	if len(rest) > 0 {
		run, err := scanRun(tx.QueryRow(ctx, `UPDATE converge_runs r SET hold = $2 WHERE id = $1 RETURNING `+runColumns, id, rest))
		if err != nil {
			return nil, fmt.Errorf("lift %s hold: %w", what, err)
		}
		return run, nil
	}
	job, err := s.jobInsertAt(ctx, tx, id, kind, time.Time{})
	if err != nil {
		return nil, fmt.Errorf("enqueue released run: %w", err)
	}
	run, err := scanRun(tx.QueryRow(ctx, `UPDATE converge_runs r SET status = 'queued', hold = '{}', job_id = $2, next_attempt_at = NULL
		WHERE id = $1 RETURNING `+runColumns, id, job))
	if err != nil {
		return nil, fmt.Errorf("queue released run: %w", err)
	}
	return run, nil
}

// RunApprove clears the approval hold of held run id, in one transaction
// with its audit entry (run.approve): the run is queued, with its job, when
// nothing else holds it. It returns ErrNotHeld when the run has no approval
// hold.
func (s *Store) RunApprove(ctx context.Context, id uuid.UUID, audit converge.AuditEntry) (*converge.Run, error) {
	return s.runDecide(ctx, id, audit, "run.approve")
}

// RunReject ends held run id cancelled, whatever holds it, in one
// transaction with its audit entry (run.reject). It returns ErrNotHeld when
// the run has no approval hold.
func (s *Store) RunReject(ctx context.Context, id uuid.UUID, audit converge.AuditEntry) (*converge.Run, error) {
	return s.runDecide(ctx, id, audit, "run.reject")
}

func (s *Store) runDecide(ctx context.Context, id uuid.UUID, audit converge.AuditEntry, action string) (*converge.Run, error) {
	var run *converge.Run
	var wfs []workflowStatus
	// Moving a workflow step locks its workflow run (a trigger), outside
	// the lock order of streams: a deadlock is run again.
	err := s.inTxRetry(ctx, func(tx pgx.Tx) error {
		wfs = nil // of a try that failed
		h, err := lockHeldRun(ctx, tx, id)
		if err != nil {
			return err
		}
		if h.status != converge.RunHeld || !slices.Contains(h.hold, converge.HoldApproval) {
			return ErrNotHeld
		}
		if action == "run.approve" {
			run, err = s.runUnhold(ctx, tx, id, h.kind, h.hold, converge.HoldApproval)
		} else {
			run, err = scanRun(tx.QueryRow(ctx, `UPDATE converge_runs r SET status = 'cancelled', finished_at = now(), next_attempt_at = NULL
				WHERE id = $1 RETURNING `+runColumns, id))
		}
		if err != nil {
			return err
		}
		audit.Action = action
		audit.Targets = []string{id.String()}
		if err := auditInsert(ctx, tx, audit); err != nil || run.WorkflowRunID == nil {
			return err
		}
		// A rejected step cancels its workflow run; an approved one may
		// set it running again.
		wfs, err = s.workflowStatusesTx(ctx, tx)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", action, id, err)
	}
	s.reportWorkflowStatuses(wfs)
	run.AttemptHistory = []*converge.Attempt{}
	return run, nil
}

// QuarantineReleaseResult is the answer of a release: the stream and its
// latest held run, now without its quarantine hold (nil when it had none).
type QuarantineReleaseResult struct {
	Kind     string        `json:"kind"`
	Resource string        `json:"resource"`
	Run      *converge.Run `json:"run"`
}

// QuarantineRelease lifts the quarantine of stream (kind, resource) and
// clears the quarantine hold of its held run (at most one: the latest, by
// G4), in one transaction with its audit entry (quarantine.release). The
// stream's failed streak is kept: the next failure quarantines it again.
// It returns a not-quarantined error naming the stream when the stream is
// not quarantined, also when there is no such stream (no event of it was
// ever accepted, or its kind is not configured): SPEC §11's 409.
func (s *Store) QuarantineRelease(ctx context.Context, kind, resource string, audit converge.AuditEntry) (*QuarantineReleaseResult, error) {
	res := &QuarantineReleaseResult{Kind: kind, Resource: resource}
	var wfs []workflowStatus
	err := s.inTxRetry(ctx, func(tx pgx.Tx) error {
		res.Run, wfs = nil, nil // of a try that failed
		var quarantined bool
		err := tx.QueryRow(ctx, lockStreamSQL("s.quarantined_at IS NOT NULL"), kind, resource).Scan(&quarantined)
		if errors.Is(err, pgx.ErrNoRows) {
			return notQuarantined(kind, resource, " (no event of it was ever accepted)")
		}
		if err != nil {
			return fmt.Errorf("lock stream: %w", err)
		}
		if !quarantined {
			return notQuarantined(kind, resource, "")
		}
		if _, err := tx.Exec(ctx, `UPDATE converge_streams SET quarantined_at = NULL WHERE kind = $1 AND resource = $2`, kind, resource); err != nil {
			return fmt.Errorf("lift quarantine: %w", err)
		}
		var id uuid.UUID
		var hold []string
		err = tx.QueryRow(ctx, `SELECT id, hold FROM converge_runs WHERE kind = $1 AND resource = $2 AND finished_at IS NULL AND status = 'held' FOR UPDATE`,
			kind, resource).Scan(&id, &hold)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return fmt.Errorf("lock held run: %w", err)
		case slices.Contains(hold, converge.HoldQuarantine):
			res.Run, err = s.runUnhold(ctx, tx, id, kind, hold, converge.HoldQuarantine)
			if err != nil {
				return err
			}
			res.Run.AttemptHistory = []*converge.Attempt{}
		}
		audit.Action = "quarantine.release"
		audit.Targets = []string{kind + "/" + resource}
		if res.Run != nil {
			audit.Detail = map[string]any{"run_id": res.Run.ID.String()}
		}
		if err := auditInsert(ctx, tx, audit); err != nil || res.Run == nil || res.Run.WorkflowRunID == nil {
			return err
		}
		// A released step may set its workflow run running again.
		wfs, err = s.workflowStatusesTx(ctx, tx)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("release quarantine of %s/%s: %w", kind, resource, err)
	}
	s.reportWorkflowStatuses(wfs)
	return res, nil
}

// notQuarantined is the error of a release of stream (kind, resource),
// which is not quarantined (why, when given): not-quarantined, naming the
// stream.
func notQuarantined(kind, resource, why string) error {
	return converge.Errorf(converge.ENOTQUARANTINED, "the stream %s/%s is not quarantined%s", kind, resource, why)
}

// RunHeldList returns up to limit held runs waiting for approval, newest
// first, and how many there are in all (the dashboard's overview).
func (s *Store) RunHeldList(ctx context.Context, limit int) ([]*converge.Run, int64, error) {
	var total int64
	if err := s.db.QueryRow(ctx, `SELECT count(*) FROM converge_runs r
		WHERE cardinality(r.hold) > 0 AND r.finished_at IS NULL AND 'approval' = ANY(r.hold)`).Scan(&total); err != nil {
		return nil, 0, fmt.Errorf("count held runs: %w", err)
	}
	rows, err := s.db.Query(ctx, `SELECT `+runColumns+` FROM converge_runs r
		WHERE cardinality(r.hold) > 0 AND r.finished_at IS NULL AND 'approval' = ANY(r.hold) ORDER BY r.created_at DESC LIMIT $1`, limit)
	if err != nil {
		return nil, 0, fmt.Errorf("list held runs: %w", err)
	}
	runs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*converge.Run, error) { return scanRun(row) })
	if err != nil {
		return nil, 0, fmt.Errorf("list held runs: %w", err)
	}
	return runs, total, nil
}
