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

// Notifications (SPEC §12): each is a River job of its own, enqueued in
// the transaction of its cause, so that a cause that commits is notified
// and one that rolls back is not. The causes are the end of a run as
// failed (its dead letter, its workflow run becoming failed, its stream
// becoming quarantined: all written by triggers in the statement that
// fails the run, read back here) and a run inserted held.

// NotifyRoutesSet sets the receivers of notifications, each named by its
// key in the jobs it gets. It is called once, before the store is used
// (jobs.NewService); without routes nothing is enqueued and the causes'
// transactions run no extra statement.
func (s *Store) NotifyRoutesSet(routes []converge.NotifyRoute) {
	s.routes = slices.Clone(routes)
}

// notifyWants reports whether some receiver wants one of the types.
func (s *Store) notifyWants(types ...string) bool {
	for _, r := range s.routes {
		for _, t := range types {
			if r.Wants(t) {
				return true
			}
		}
	}
	return false
}

// notifyEnqueue enqueues, in tx, one notification of type typ about
// subject to each receiver that wants it.
func (s *Store) notifyEnqueue(ctx context.Context, tx pgx.Tx, typ string, at time.Time, subject converge.NotificationSubject) error {
	var args []converge.NotificationArgs
	var attempts []int
	for _, r := range s.routes {
		if r.Wants(typ) {
			args = append(args, converge.NotificationArgs{ID: newID(), Receiver: r.Key, ReceiverURL: r.Shown,
				Type: typ, At: at, Subject: subject})
			attempts = append(attempts, r.MaxAttempts)
		}
	}
	if len(args) == 0 {
		return nil
	}
	return s.notificationJobsInsert(ctx, tx, args, attempts)
}

// notifyRunsHeld notifies run.held for runs just inserted held in tx.
func (s *Store) notifyRunsHeld(ctx context.Context, tx pgx.Tx, runs []*converge.Run) error {
	if !s.notifyWants(converge.NotifyRunHeld) {
		return nil
	}
	for _, r := range runs {
		id, ev := r.ID, r.EventID
		err := s.notifyEnqueue(ctx, tx, converge.NotifyRunHeld, r.CreatedAt, converge.NotificationSubject{
			ID: r.ID, Kind: r.Kind, Resource: r.Resource, Version: r.Version, RunID: &id, EventID: &ev, Hold: r.Hold})
		if err != nil {
			return err
		}
	}
	return nil
}

// notifyRunsFailed notifies what follows from runs ending failed in tx:
// the dead letter each got (dead_letter.created), its workflow run if it
// became failed in tx (workflow_run.failed), and its stream if it became
// quarantined in tx (stream.quarantined). The triggers that wrote these
// ran in the statement that failed the run; a row changed by this
// transaction has its id as xmin.
//
// workflow_run.failed is notified once per workflow run, when a step
// first fails (SPEC §10): not again when a redriven step fails again (the
// redrive had put the workflow run back to running), nor when another
// step fails later, nor twice for two steps failing in one transaction.
// A step's failed runs are kept while their workflow run is (retention
// never prunes an event a kept workflow run refers to), so an earlier
// failure is always found.
func (s *Store) notifyRunsFailed(ctx context.Context, tx pgx.Tx, runIDs []uuid.UUID) error {
	if len(runIDs) == 0 || !s.notifyWants(converge.NotifyDeadLetterCreated, converge.NotifyWorkflowRunFailed, converge.NotifyStreamQuarantined) {
		return nil
	}
	rows, err := tx.Query(ctx, `SELECT d.id, d.run_id, d.event_id, d.kind, d.resource, d.version, d.reason, coalesce(d.error->>'message', ''), now(),
			CASE WHEN s.quarantined_at = now() THEN s.quarantined_at END,
			w.id, w.workflow, w.resource, w.version, ws.name
		FROM converge_dead_letters d
		JOIN converge_runs r ON r.id = d.run_id
		JOIN converge_streams s ON s.kind = d.kind AND s.resource = d.resource
		LEFT JOIN converge_workflow_runs w ON w.id = r.workflow_run_id AND w.status = 'failed'
			AND w.xmin = pg_current_xact_id()::xid
			AND NOT EXISTS (SELECT 1 FROM converge_events we JOIN converge_runs wr ON wr.event_id = we.id
				WHERE we.workflow_run_id = w.id AND wr.status = 'failed' AND NOT wr.xmin = pg_current_xact_id()::xid)
		LEFT JOIN converge_workflow_steps ws ON ws.workflow_run_id = w.id AND ws.event_id = d.event_id
		WHERE d.run_id = ANY($1) AND d.status = 'open' AND d.xmin = pg_current_xact_id()::xid
		ORDER BY d.id`, uuids(runIDs))
	if err != nil {
		return fmt.Errorf("read what failed runs caused: %w", err)
	}
	type caused struct {
		dl                         converge.NotificationSubject
		at                         time.Time
		quarantinedAt              *time.Time
		workflowRunID              *uuid.UUID
		workflow, workflowResource *string
		workflowVersion            *int64
		step                       *string
	}
	var all []caused
	for rows.Next() {
		var c caused
		var runID, eventID uuid.UUID
		if err := rows.Scan(&c.dl.ID, &runID, &eventID, &c.dl.Kind, &c.dl.Resource, &c.dl.Version, &c.dl.Reason, &c.dl.Error, &c.at,
			&c.quarantinedAt, &c.workflowRunID, &c.workflow, &c.workflowResource, &c.workflowVersion, &c.step); err != nil {
			rows.Close()
			return fmt.Errorf("read what failed runs caused: %w", err)
		}
		c.dl.RunID, c.dl.EventID = &runID, &eventID
		all = append(all, c)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read what failed runs caused: %w", err)
	}
	workflowRuns := map[uuid.UUID]bool{}
	for _, c := range all {
		if err := s.notifyEnqueue(ctx, tx, converge.NotifyDeadLetterCreated, c.at, c.dl); err != nil {
			return err
		}
		if c.workflowRunID != nil && !workflowRuns[*c.workflowRunID] {
			workflowRuns[*c.workflowRunID] = true
			wf := c.dl
			wf.ID, wf.Workflow, wf.Reason = *c.workflowRunID, *c.workflow, ""
			wf.Resource, wf.Version = *c.workflowResource, *c.workflowVersion
			if c.step != nil {
				wf.Step = *c.step
			}
			if err := s.notifyEnqueue(ctx, tx, converge.NotifyWorkflowRunFailed, c.at, wf); err != nil {
				return err
			}
		}
		if c.quarantinedAt != nil {
			q := c.dl
			q.ID, q.Reason, q.QuarantinedAt = *c.dl.RunID, "", c.quarantinedAt
			if err := s.notifyEnqueue(ctx, tx, converge.NotifyStreamQuarantined, c.at, q); err != nil {
				return err
			}
		}
	}
	return nil
}

// NotificationCurrent reports whether the subject of a notification is
// still as notified: the dead letter open, the workflow run failed, the
// run held, the stream quarantined since the same moment. A notification
// whose subject moved on (or is gone) is not sent.
func (s *Store) NotificationCurrent(ctx context.Context, n converge.NotificationArgs) (bool, error) {
	var q string
	args := []any{n.Subject.ID}
	switch n.Type {
	case converge.NotifyDeadLetterCreated:
		q = `SELECT status = 'open' FROM converge_dead_letters WHERE id = $1`
	case converge.NotifyWorkflowRunFailed:
		q = `SELECT status = 'failed' FROM converge_workflow_runs WHERE id = $1`
	case converge.NotifyRunHeld:
		q = `SELECT status = 'held' FROM converge_runs WHERE id = $1`
	case converge.NotifyStreamQuarantined:
		if n.Subject.QuarantinedAt == nil {
			return false, nil
		}
		q = `SELECT coalesce(abs(extract(epoch FROM quarantined_at - $3)) < 0.001, false)
			FROM converge_streams WHERE kind = $1 AND resource = $2`
		args = []any{n.Subject.Kind, n.Subject.Resource, *n.Subject.QuarantinedAt}
	default:
		return false, fmt.Errorf("notification %s: unknown type %q", n.ID, n.Type)
	}
	var current bool
	err := s.db.QueryRow(ctx, q, args...).Scan(&current)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("notification %s: read its subject: %w", n.ID, err)
	}
	return current, nil
}
