package store

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/converge-run/converge"
)

// DeadLetterRedriveParams is an operator's redrive of one dead letter.
type DeadLetterRedriveParams struct {
	ID uuid.UUID
	// Kinds are the configured kinds: a new run gets its kind's
	// MaxAttempts; a dead letter of a kind missing here is not redriven
	// (EKINDNOTSERVED: no worker would run it).
	Kinds converge.KindPolicies
	// Audit is the audit entry written with the redrive.
	Audit converge.AuditEntry
	// TraceParent is the W3C traceparent of the redrive request's span:
	// the new run is created under it, linked to the failed run's.
	TraceParent string
}

// DeadLetterRedrive starts a new run (number + 1, fresh attempts) of the
// dead letter's event and marks the dead letter redriven, in one
// transaction with its audit entry. It fails with ErrNotFound,
// ESUPERSEDED when a newer version of the stream has been accepted since
// (the dead letter open or superseded), ENOTOPEN when it is redriven or
// discarded, and EKINDNOTSERVED when its kind is
// not among p.Kinds (no longer configured).
func (s *Store) DeadLetterRedrive(ctx context.Context, p DeadLetterRedriveParams) (*converge.Run, error) {
	res, runs, err := s.deadLetterAct(ctx, actRedrive, DeadLetterBulkParams{IDs: []uuid.UUID{p.ID}, Kinds: p.Kinds, Audit: p.Audit,
		TraceParent: p.TraceParent})
	if err != nil {
		return nil, fmt.Errorf("redrive dead letter %s: %w", p.ID, err)
	}
	if err := skipError(res, "redriven"); err != nil {
		return nil, err
	}
	return runs[p.ID], nil
}

// DeadLetterDiscard marks an open dead letter discarded, in one transaction
// with its audit entry, and returns it. It fails with ErrNotFound, or
// ENOTOPEN unless the dead letter is open.
func (s *Store) DeadLetterDiscard(ctx context.Context, id uuid.UUID, audit converge.AuditEntry) (*converge.DeadLetter, error) {
	res, _, err := s.deadLetterAct(ctx, actDiscard, DeadLetterBulkParams{IDs: []uuid.UUID{id}, Audit: audit})
	if err != nil {
		return nil, fmt.Errorf("discard dead letter %s: %w", id, err)
	}
	if err := skipError(res, "discarded"); err != nil {
		return nil, err
	}
	return s.DeadLetterGet(ctx, id)
}

// skipError turns the skip of a single-item action into its error.
func skipError(res *converge.DeadLetterBulkResult, participle string) error {
	if len(res.Skipped) == 0 {
		return nil
	}
	sk := res.Skipped[0]
	switch sk.Reason {
	case converge.SkipNotFound:
		return converge.ErrNotFound
	case converge.SkipNotOpen:
		return converge.Errorf(converge.ENOTOPEN, "dead letter %s is not open; only an open dead letter can be %s", sk.ID, participle)
	case converge.SkipSuperseded:
		return converge.Errorf(converge.ESUPERSEDED, "a newer version of the stream of dead letter %s has been accepted since; redriving it would go backwards", sk.ID)
	case converge.SkipKindNotServed:
		return converge.Errorf(converge.EKINDNOTSERVED, "the kind of dead letter %s is not configured any more: no worker would run it; configure the kind again to redrive it", sk.ID)
	default:
		return converge.Errorf(converge.ECONFLICT, "dead letter %s cannot be %s: %s", sk.ID, participle, sk.Reason)
	}
}

// DeadLetterBulkParams selects dead letters for a bulk redrive or discard:
// either IDs or Filter (at most converge.MaxDeadLetterBulk of its matches,
// newest first).
type DeadLetterBulkParams struct {
	// IDs are the dead letters to act on, in the order they are reported
	// (a repeated id counts once).
	IDs []uuid.UUID
	// Filter selects the dead letters to act on instead of IDs.
	Filter *converge.DeadLetterFilter
	// DryRun checks every dead letter as the action would and changes
	// nothing.
	DryRun bool
	// Kinds is used by redrive: see DeadLetterRedriveParams.
	Kinds converge.KindPolicies
	// Audit is the audit entry written with the action; the action sets
	// its Action and Targets (and a redrive its Detail).
	Audit converge.AuditEntry
	// TraceParent is used by redrive: see DeadLetterRedriveParams.
	TraceParent string
}

// DeadLetterRedriveMany redrives each selected dead letter that is open, not
// superseded and of a configured kind, in one transaction with one audit
// entry, and reports the others as skipped with a reason (not-found,
// not-open, superseded, kind-not-served).
func (s *Store) DeadLetterRedriveMany(ctx context.Context, p DeadLetterBulkParams) (*converge.DeadLetterBulkResult, error) {
	res, _, err := s.deadLetterAct(ctx, actRedrive, p)
	if err != nil {
		return nil, fmt.Errorf("redrive dead letters: %w", err)
	}
	return res, nil
}

// DeadLetterDiscardMany discards each selected dead letter that is open, in
// one transaction with one audit entry, and reports the others as skipped
// with a reason (not-found, not-open).
func (s *Store) DeadLetterDiscardMany(ctx context.Context, p DeadLetterBulkParams) (*converge.DeadLetterBulkResult, error) {
	res, _, err := s.deadLetterAct(ctx, actDiscard, p)
	if err != nil {
		return nil, fmt.Errorf("discard dead letters: %w", err)
	}
	return res, nil
}

// deadLetterAction is an action on dead letters, named as its audit
// entries name it.
type deadLetterAction string

const (
	actRedrive deadLetterAction = "dead_letter.redrive"
	actDiscard deadLetterAction = "dead_letter.discard"
)

// lockedDeadLetter is what an action needs of a dead letter.
type lockedDeadLetter struct {
	id, eventID, runID uuid.UUID
	kind, resource     string
	version            int64
	status             converge.DeadLetterStatus
}

// scanLockedDeadLetter reads id, event_id, run_id, kind, resource, version
// and status.
func scanLockedDeadLetter(row pgx.CollectableRow) (*lockedDeadLetter, error) {
	var d lockedDeadLetter
	err := row.Scan(&d.id, &d.eventID, &d.runID, &d.kind, &d.resource, &d.version, &d.status)
	return &d, err
}

// deadLetterAct runs a redrive or discard of the selected dead letters in
// one transaction. Locks are taken in one global order, the same as
// acceptance and attempts use: the streams' rows (sorted by kind,
// resource), then the dead letters' rows (sorted by id). Holding the stream
// row is what makes "not superseded" true until commit: an event accepted
// meanwhile waits, and then supersedes the new run.
func (s *Store) deadLetterAct(ctx context.Context, act deadLetterAction, p DeadLetterBulkParams) (*converge.DeadLetterBulkResult, map[uuid.UUID]*converge.Run, error) {
	if (p.Filter == nil) == (p.IDs == nil) {
		return nil, nil, converge.InvalidField("ids", "give either ids or a filter")
	}
	if len(p.IDs) > converge.MaxDeadLetterBulk {
		return nil, nil, converge.InvalidField("ids", fmt.Sprintf("at most %d dead letters per call", converge.MaxDeadLetterBulk))
	}
	res := &converge.DeadLetterBulkResult{Done: []uuid.UUID{}, Skipped: []converge.DeadLetterSkip{}, DryRun: p.DryRun}
	runs := map[uuid.UUID]*converge.Run{}
	var wfs []workflowStatus
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		wfs = nil
		ids := dedupe(p.IDs)
		if p.Filter != nil {
			var err error
			ids, res.More, err = deadLetterMatch(ctx, tx, p.Filter)
			if err != nil {
				return err
			}
		}
		if len(ids) == 0 {
			return nil
		}
		// Streams first: read each dead letter's stream (they never
		// change), then lock the streams in order.
		rows, err := tx.Query(ctx, `SELECT DISTINCT kind, resource FROM converge_dead_letters WHERE id = ANY($1)`, ids)
		if err != nil {
			return fmt.Errorf("find streams: %w", err)
		}
		streams, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (streamKey, error) {
			var st streamKey
			return st, row.Scan(&st.kind, &st.resource)
		})
		if err != nil {
			return fmt.Errorf("find streams: %w", err)
		}
		kinds := make([]string, len(streams))
		resources := make([]string, len(streams))
		for i, st := range streams {
			kinds[i], resources[i] = st.kind, st.resource
		}
		latest := map[streamKey]int64{}
		rows, err = tx.Query(ctx, lockStreamsSQL("s.kind, s.resource, s.latest_version"), kinds, resources)
		if err != nil {
			return fmt.Errorf("lock streams: %w", err)
		}
		var st streamKey
		var i, v int64
		if _, err := pgx.ForEachRow(rows, []any{&i, &st.kind, &st.resource, &v}, func() error {
			latest[st] = v
			return nil
		}); err != nil {
			return fmt.Errorf("lock streams: %w", err)
		}
		rows, err = tx.Query(ctx, `SELECT id, event_id, run_id, kind, resource, version, status
			FROM converge_dead_letters WHERE id = ANY($1) ORDER BY id FOR UPDATE`, ids)
		if err != nil {
			return fmt.Errorf("lock dead letters: %w", err)
		}
		lockedRows, err := pgx.CollectRows(rows, scanLockedDeadLetter)
		if err != nil {
			return fmt.Errorf("lock dead letters: %w", err)
		}
		locked := make(map[uuid.UUID]*lockedDeadLetter, len(lockedRows))
		for _, d := range lockedRows {
			locked[d.id] = d
		}
		for _, id := range ids {
			d, ok := locked[id]
			switch {
			case !ok:
				res.Skipped = append(res.Skipped, converge.DeadLetterSkip{ID: id, Reason: converge.SkipNotFound})
				continue
			case act == actRedrive && d.status == converge.DeadLetterSuperseded:
				// A newer version of the stream succeeded since (SPEC §4:
				// 409 superseded, not not-open).
				res.Skipped = append(res.Skipped, converge.DeadLetterSkip{ID: id, Reason: converge.SkipSuperseded})
				continue
			case d.status != converge.DeadLetterOpen:
				res.Skipped = append(res.Skipped, converge.DeadLetterSkip{ID: id, Reason: converge.SkipNotOpen})
				continue
			case act == actRedrive && latest[streamKey{d.kind, d.resource}] > d.version:
				res.Skipped = append(res.Skipped, converge.DeadLetterSkip{ID: id, Reason: converge.SkipSuperseded})
				continue
			case act == actRedrive && !kindServed(p.Kinds, d.kind):
				res.Skipped = append(res.Skipped, converge.DeadLetterSkip{ID: id, Reason: converge.SkipKindNotServed})
				continue
			}
			if act == actRedrive {
				var active bool
				err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM converge_runs WHERE kind = $1 AND resource = $2
					AND finished_at IS NULL)`, d.kind, d.resource).Scan(&active)
				if err != nil {
					return fmt.Errorf("look for an unfinished run: %w", err)
				}
				if active {
					// Unreachable while the stream's latest version is this
					// dead letter's: its event's only unfinished run would
					// be a redrive, which resolves the dead letter.
					res.Skipped = append(res.Skipped, converge.DeadLetterSkip{ID: id, Reason: converge.ECONFLICT})
					continue
				}
			}
			res.Done = append(res.Done, id)
			if p.DryRun {
				continue
			}
			switch act {
			case actRedrive:
				run, err := s.deadLetterRedrive(ctx, tx, d, p.Kinds, p.Audit.Actor, p.TraceParent)
				if err != nil {
					return err
				}
				runs[id] = run
			case actDiscard:
				if _, err := tx.Exec(ctx, `UPDATE converge_dead_letters SET status = 'discarded', resolved_at = now(), resolved_by = $2
					WHERE id = $1`, id, actorName(p.Audit.Actor)); err != nil {
					return fmt.Errorf("discard: %w", err)
				}
			}
		}
		if p.DryRun || len(res.Done) == 0 {
			return nil
		}
		audit := p.Audit
		audit.Action = string(act)
		audit.Targets = make([]string, len(res.Done))
		for i, id := range res.Done {
			audit.Targets[i] = id.String()
		}
		if act == actRedrive {
			runIDs := make([]string, len(res.Done))
			for i, id := range res.Done {
				runIDs[i] = runs[id].ID.String()
			}
			audit.Detail = map[string]any{"run_ids": runIDs}
		}
		if err := auditInsert(ctx, tx, audit); err != nil {
			return err
		}
		// A discarded step's dead letter ends its workflow run failed (a
		// trigger), which enters failed again if a sibling's redrive had
		// set it running; a redriven one sets it running (or waiting)
		// again.
		wfs, err = s.workflowStatusesTx(ctx, tx)
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	s.reportWorkflowStatuses(wfs)
	return res, runs, nil
}

// deadLetterRedrive adds the next run of d's event with its job and marks d
// redriven. The caller holds the stream's and d's row locks.
// The new run is created under traceParent (the redrive request's span)
// and links to the failed run's trace.
func (s *Store) deadLetterRedrive(ctx context.Context, tx pgx.Tx, d *lockedDeadLetter, kinds converge.KindPolicies, actor, traceParent string) (*converge.Run, error) {
	var next, failedMax, failedQA int
	var workflowRun *uuid.UUID
	var failedTrace string
	err := tx.QueryRow(ctx, `SELECT (SELECT max(number) + 1 FROM converge_runs WHERE event_id = $1),
			max_attempts, quarantine_after, workflow_run_id, coalesce(trace_parent, '') FROM converge_runs WHERE id = $2`,
		d.eventID, d.runID).Scan(&next, &failedMax, &failedQA, &workflowRun, &failedTrace)
	if err != nil {
		return nil, fmt.Errorf("number the new run: %w", err)
	}
	// The kind is configured (kindServed).
	n, qa := failedMax, failedQA
	if k, ok := kinds.Lookup(d.kind); ok {
		if k.MaxAttempts > 0 {
			n = k.MaxAttempts
		}
		qa = k.QuarantineAfter
	}
	// A redrive of a quarantined stream is held like any new run of it
	// (SPEC §11); the stream's row is locked.
	var quarantined bool
	if err := tx.QueryRow(ctx, `SELECT quarantined_at IS NOT NULL FROM converge_streams WHERE kind = $1 AND resource = $2`,
		d.kind, d.resource).Scan(&quarantined); err != nil {
		return nil, fmt.Errorf("read stream: %w", err)
	}
	var hold []string
	if quarantined {
		hold = []string{converge.HoldQuarantine}
	}
	ev := &converge.Event{ID: d.eventID, Kind: d.kind, Resource: d.resource, Version: d.version, WorkflowRunID: workflowRun}
	run, err := s.runInsert(ctx, tx, ev, next, n, hold, qa, runTrace{parent: traceParent, link: failedTrace})
	if err != nil {
		return nil, err
	}
	if _, err := tx.Exec(ctx, `UPDATE converge_dead_letters SET status = 'redriven', resolved_at = now(), resolved_by = $2
		WHERE id = $1`, d.id, actorName(actor)); err != nil {
		return nil, fmt.Errorf("mark redriven: %w", err)
	}
	return run, nil
}

// kindServed reports whether kind is among the configured kinds.
func kindServed(kinds converge.KindPolicies, kind string) bool {
	_, ok := kinds.Lookup(kind)
	return ok
}

// deadLetterMatch returns the ids of the dead letters a bulk filter selects
// (newest first, at most MaxDeadLetterBulk) and whether there are more.
func deadLetterMatch(ctx context.Context, tx pgx.Tx, f *converge.DeadLetterFilter) ([]uuid.UUID, bool, error) {
	ids, _, err := deadLetterQuery(ctx, tx, "d.id", func(row pgx.Row, extra ...any) (uuid.UUID, error) {
		var id uuid.UUID
		return id, row.Scan(append([]any{&id}, extra...)...)
	}, f, nil, converge.MaxDeadLetterBulk+1)
	if err != nil {
		return nil, false, fmt.Errorf("select dead letters: %w", err)
	}
	if len(ids) > converge.MaxDeadLetterBulk {
		return ids[:converge.MaxDeadLetterBulk], true, nil
	}
	return ids, false, nil
}

// dedupe returns ids without repeats, each at the place of its first
// occurrence; nil for nil.
func dedupe(ids []uuid.UUID) []uuid.UUID {
	if ids == nil {
		return nil
	}
	out := make([]uuid.UUID, 0, len(ids))
	seen := make(map[uuid.UUID]struct{}, len(ids))
	for _, id := range ids {
		if _, ok := seen[id]; !ok {
			seen[id] = struct{}{}
			out = append(out, id)
		}
	}
	return out
}

// actorName is who resolved a dead letter, for resolved_by: the actor, or
// "unknown".
func actorName(a string) string {
	if a == "" {
		return "unknown"
	}
	return a
}
