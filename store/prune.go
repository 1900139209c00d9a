package store

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/converge-run/converge"
)

// PruneBatchSize is the most events (with their runs, attempts and dead
// letters) one pruning transaction deletes, and the most rows of a table
// deleted alone (dead letters, deliveries, audit entries).
const PruneBatchSize = 1000

// DefaultPruneLeaseTTL is how long a pass holds the prune lease without
// renewing it; it renews it at the start of every batch, in the batch's
// transaction, which keeps the lease row locked until it commits.
const DefaultPruneLeaseTTL = time.Minute

// ErrPruneBusy is returned when another pruning pass holds the lease.
var ErrPruneBusy = &converge.AppError{Code: converge.ECONFLICT, Message: "another pruning pass is running (it holds the prune lease)"}

// PruneParams is one pruning pass (SPEC §13).
type PruneParams struct {
	Retention converge.Retention
	// Now is the moment the ages are measured from; zero means the
	// database's now() when the pass starts. One moment holds for the
	// whole pass.
	Now time.Time
	// DryRun counts what a pass would delete and writes nothing (it takes
	// no lease either).
	DryRun bool
	// BatchSize is at most PruneBatchSize; 0 means PruneBatchSize.
	BatchSize int
	// LeaseTTL is the lease's lifetime between renewals; 0 means
	// DefaultPruneLeaseTTL.
	LeaseTTL time.Duration
	// Trigger names what started the pass ("job", "cli"), for its audit
	// entry.
	Trigger string
	// Deleted, if set, is called after each committed batch with the rows
	// it deleted from table (one of converge.PruneTables).
	Deleted func(table string, n int64)
}

// pruneCutoffs are the moments before which rows are old enough; nil
// keeps that kind of row forever.
type pruneCutoffs struct {
	now                                         time.Time
	runs, deadLetters, workflowRuns, deliveries *time.Time
	audit                                       *time.Time
}

// cutoff returns now − age, or nil for an age of 0 (forever).
func cutoff(now time.Time, age time.Duration) *time.Time {
	if age <= 0 {
		return nil
	}
	t := now.Add(-age)
	return &t
}

// idClockMargin is how far past a cutoff the id bound reaches: ids are
// version 7 UUIDs made by the process's clock, received_at and the like by
// the database's; a process clock ahead by more only delays pruning.
const idClockMargin = time.Minute

// idBefore returns the smallest version 7 UUID of a millisecond after
// t + idClockMargin: every id made before that moment is below it. It
// lets a pass walk a table's primary key (ids are time-ordered) instead of
// an index on its time column; the time column is checked exactly.
func idBefore(t time.Time) uuid.UUID {
	var id uuid.UUID
	ms := uint64(t.Add(idClockMargin).UnixMilli() + 1)
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], ms)
	copy(id[:6], b[2:])
	return id
}

// prunableEventSQL is the condition on event e (SPEC §13) that every run
// of it finished before @runs_cut, that no attempt of them is still open
// (a superseded or cancelled run's call may still be in flight, or its
// worker gone until the reconciler records it abandoned), that none of its dead letters is open
// or was resolved at or after @dl_cut (every one keeps it when dead
// letters are kept forever: @dl_cut NULL), and that it is neither its
// stream's latest accepted event nor the event of its applied version.
// Whether a workflow run refers to it is the callers'.
const prunableEventSQL = `NOT EXISTS (SELECT 1 FROM converge_runs r WHERE r.event_id = e.id
	          AND (r.finished_at IS NULL OR r.finished_at >= @runs_cut))
	AND NOT EXISTS (SELECT 1 FROM converge_runs r JOIN converge_attempts a ON a.run_id = r.id
	          WHERE r.event_id = e.id AND a.outcome IS NULL)
	AND NOT EXISTS (SELECT 1 FROM converge_dead_letters d WHERE d.event_id = e.id
	          AND (d.status = 'open' OR @dl_cut::timestamptz IS NULL OR d.resolved_at IS NULL OR d.resolved_at >= @dl_cut))
	AND NOT EXISTS (SELECT 1 FROM converge_streams s WHERE s.kind = e.kind AND s.resource = e.resource
	          AND (s.latest_version = e.version OR s.applied_version = e.version))`

// plainPrunableEventsSQL selects the next events that may be pruned and
// that no kept workflow run refers to (none ever did, or theirs was
// pruned), in id order after @after.
const plainPrunableEventsSQL = `SELECT e.id FROM converge_events e
	WHERE e.id > @after AND e.id < @ev_before AND e.received_at < @runs_cut
	  AND NOT EXISTS (SELECT 1 FROM converge_workflow_runs w WHERE w.id = e.workflow_run_id)
	  AND NOT EXISTS (SELECT 1 FROM converge_workflow_steps st WHERE st.event_id = e.id)
	  AND ` + prunableEventSQL + `
	ORDER BY e.id LIMIT @n`

// workflowEventsSQL is the events of workflow run w.id: those naming it
// and its accepted steps' (the same events, written twice).
const workflowEventsSQL = `(SELECT e.id, e.kind, e.resource, e.version FROM converge_events e WHERE e.workflow_run_id = w.id
	UNION SELECT e.id, e.kind, e.resource, e.version FROM converge_workflow_steps st JOIN converge_events e ON e.id = st.event_id
	 WHERE st.workflow_run_id = w.id)`

// prunableWorkflowRunsSQL selects the next final workflow runs that may be
// pruned (finished before @wf_cut, SPEC §13), each with those of its
// events that may be pruned with it (none while events are kept for ever:
// @runs_cut NULL). Its other events stay, their workflow run gone (a
// stream's latest accepted or applied version), and are pruned later as
// plain events.
const prunableWorkflowRunsSQL = `SELECT w.id, coalesce((SELECT array_agg(e.id) FROM ` + workflowEventsSQL + ` e
	    WHERE @runs_cut::timestamptz IS NOT NULL AND ` + prunableEventSQL + `), '{}')
	FROM converge_workflow_runs w
	WHERE w.id > @after AND w.id < @wf_before AND w.finished_at < @wf_cut
	ORDER BY w.id LIMIT @n`

// Prune runs one pruning pass: under the prune lease, it deletes in
// batches of at most PruneBatchSize events (each a transaction of its own,
// no lock kept between them) the events old enough with their runs,
// attempts and dead letters, final workflow runs with their steps and
// events, resolved dead letters on their own, deliveries and audit
// entries, and writes one audit entry (retention.prune, actor system)
// when it deleted anything. The database's triggers refuse any delete of
// a run that is not terminal or a workflow run that is not final, and any
// delete outside this path. A dry run counts instead and writes nothing.
//
// On an error (the context ending, the lease lost) Prune returns what the
// committed batches deleted along with it.
func (s *Store) Prune(ctx context.Context, p PruneParams) (*converge.PruneResult, error) {
	cuts, err := s.pruneCutoffs(ctx, p)
	if err != nil {
		return nil, err
	}
	if p.DryRun {
		return s.pruneCount(ctx, cuts)
	}
	batch := p.BatchSize
	if batch <= 0 || batch > PruneBatchSize {
		batch = PruneBatchSize
	}
	ttl := p.LeaseTTL
	if ttl <= 0 {
		ttl = DefaultPruneLeaseTTL
	}
	holder := newID()
	if err := s.pruneLeaseTake(ctx, holder, ttl); err != nil {
		return nil, err
	}
	defer s.pruneLeaseRelease(context.WithoutCancel(ctx), holder)

	res := converge.NewPruneResult(false)
	pass := &prunePass{s: s, cuts: cuts, batch: batch, holder: holder, ttl: ttl, res: res, deleted: p.Deleted}
	err = pass.run(ctx)
	if res.Total > 0 {
		// The pass's audit entry, also when it stopped early: it says
		// what was deleted.
		actx := context.WithoutCancel(ctx)
		aerr := s.inTx(actx, func(tx pgx.Tx) error {
			return auditInsert(actx, tx, converge.AuditEntry{Actor: "system", Role: "system", Action: "retention.prune",
				Detail: map[string]any{"deleted": res.Deleted, "batches": res.Batches, "retention": retentionDetail(p.Retention), "trigger": p.Trigger}})
		})
		err = errors.Join(err, aerr)
	}
	if err != nil {
		return res, fmt.Errorf("prune: %w", err)
	}
	return res, nil
}

// retentionDetail is the retention a pass applied, for its audit entry.
func retentionDetail(r converge.Retention) map[string]string {
	return map[string]string{"runs": r.Runs.String(), "dead_letters": r.DeadLetters.String(), "workflow_runs": r.WorkflowRuns.String(),
		"deliveries": r.Deliveries.String(), "audit": r.Audit.String()}
}

// pruneCutoffs reads the pass's moment (the database's, unless given)
// and computes the cutoffs from it.
func (s *Store) pruneCutoffs(ctx context.Context, p PruneParams) (pruneCutoffs, error) {
	now := p.Now
	if now.IsZero() {
		if err := s.db.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
			return pruneCutoffs{}, fmt.Errorf("prune: read the time: %w", err)
		}
	}
	r := p.Retention
	return pruneCutoffs{now: now, runs: cutoff(now, r.Runs), deadLetters: cutoff(now, r.DeadLetters),
		workflowRuns: cutoff(now, r.WorkflowRuns), deliveries: cutoff(now, r.Deliveries), audit: cutoff(now, r.Audit)}, nil
}

// args are the named arguments of the eligibility statements: the
// cutoffs, the id bounds derived from them, the cursor and the limit.
func (c pruneCutoffs) args(after uuid.UUID, n int64) pgx.NamedArgs {
	return pgx.NamedArgs{"after": after, "runs_cut": c.runs, "dl_cut": c.deadLetters, "wf_cut": c.workflowRuns, "n": n,
		"ev_before": idBefore(cutOr(c.runs, c.now)), "wf_before": idBefore(cutOr(c.workflowRuns, c.now))}
}

// pruneLeaseTake takes the prune lease for ttl, or returns ErrPruneBusy
// when another pass holds it unexpired or is in one of its batches (which
// lock the lease row: pruneLeaseHold), without waiting for that batch.
func (s *Store) pruneLeaseTake(ctx context.Context, holder uuid.UUID, ttl time.Duration) error {
	tag, err := s.db.Exec(ctx, `WITH free AS (SELECT id FROM converge_prune_lease WHERE id FOR UPDATE SKIP LOCKED)
		UPDATE converge_prune_lease l SET holder = $1, expires_at = clock_timestamp() + $2 * interval '1 microsecond'
		FROM free WHERE l.id = free.id AND (l.holder IS NULL OR l.expires_at < clock_timestamp())`, holder, ttl.Microseconds())
	if err != nil {
		return fmt.Errorf("prune: take the lease: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return ErrPruneBusy
	}
	return nil
}

// pruneLeaseHold renews the lease holder holds, in tx, the transaction of
// one of its batches: the lease row stays locked until the batch commits,
// so no other pass takes the lease while a batch runs, however long it
// takes; a pass that lost the lease between two batches (it expired and
// another pass took it) stops with an error before its next batch.
func pruneLeaseHold(ctx context.Context, tx pgx.Tx, holder uuid.UUID, ttl time.Duration) error {
	tag, err := tx.Exec(ctx, `UPDATE converge_prune_lease SET expires_at = clock_timestamp() + $2 * interval '1 microsecond'
		WHERE id AND holder = $1`, holder, ttl.Microseconds())
	if err != nil {
		return fmt.Errorf("prune: renew the lease: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return errors.New("prune: the lease was lost (it expired and another pass took it)")
	}
	return nil
}

// pruneLeaseRelease gives the lease up (an error leaves it to expire).
func (s *Store) pruneLeaseRelease(ctx context.Context, holder uuid.UUID) {
	_, _ = s.db.Exec(ctx, `UPDATE converge_prune_lease SET holder = NULL, expires_at = NULL WHERE id AND holder = $1`, holder)
}

// PruneLeaseHeld reports whether a pruning pass holds the prune lease now.
func (s *Store) PruneLeaseHeld(ctx context.Context) (bool, error) {
	var held bool
	err := s.db.QueryRow(ctx, `SELECT holder IS NOT NULL AND expires_at >= now() FROM converge_prune_lease WHERE id`).Scan(&held)
	if err != nil {
		return false, fmt.Errorf("read the prune lease: %w", err)
	}
	return held, nil
}

// prunePass is one pass's progress through its phases.
type prunePass struct {
	s       *Store
	cuts    pruneCutoffs
	batch   int
	holder  uuid.UUID
	ttl     time.Duration
	res     *converge.PruneResult
	deleted func(string, int64)
}

// run walks the phases in order: workflow runs (with their events),
// events, dead letters on their own, deliveries, audit entries. Each
// phase repeats its batch until a batch deletes nothing.
func (p *prunePass) run(ctx context.Context) error {
	phases := []struct {
		on    bool
		batch func(context.Context, pgx.Tx, *uuid.UUID, map[string]int64) (bool, error)
	}{
		{p.cuts.workflowRuns != nil, p.workflowBatch},
		{p.cuts.runs != nil, p.eventBatch},
		{p.cuts.deadLetters != nil, p.deadLetterBatch},
		{p.cuts.deliveries != nil, p.timedBatch("deliveries", "converge_deliveries", "received_at", p.cuts.deliveries)},
		{p.cuts.audit != nil, p.timedBatch("audit", "converge_audit", "at", p.cuts.audit)},
	}
	for _, ph := range phases {
		if !ph.on {
			continue
		}
		cursor := uuid.Nil
		for {
			if err := ctx.Err(); err != nil {
				return err
			}
			counts := map[string]int64{}
			more := false
			err := p.s.inTx(ctx, func(tx pgx.Tx) error {
				clear(counts)
				if err := pruneLeaseHold(ctx, tx, p.holder, p.ttl); err != nil {
					return err
				}
				if _, err := tx.Exec(ctx, `SELECT set_config('converge.pruning', 'on', true)`); err != nil {
					return fmt.Errorf("mark the transaction as pruning: %w", err)
				}
				var err error
				more, err = ph.batch(ctx, tx, &cursor, counts)
				return err
			})
			if err != nil {
				return err
			}
			p.committed(counts)
			if !more {
				break
			}
		}
	}
	return nil
}

// committed adds a committed batch's counts to the result.
func (p *prunePass) committed(counts map[string]int64) {
	var any bool
	for _, t := range converge.PruneTables {
		n := counts[t]
		if n == 0 {
			continue
		}
		any = true
		p.res.Add(t, n)
		if p.deleted != nil {
			p.deleted(t, n)
		}
	}
	if any {
		p.res.Batches++
	}
}

// eventBatch deletes the next batch of prunable events of no workflow
// run, with their runs, attempts and dead letters.
func (p *prunePass) eventBatch(ctx context.Context, tx pgx.Tx, cursor *uuid.UUID, counts map[string]int64) (bool, error) {
	// Load: the next prunable events.
	rows, err := tx.Query(ctx, plainPrunableEventsSQL, p.cuts.args(*cursor, int64(p.batch)))
	if err != nil {
		return false, fmt.Errorf("select events to prune: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return false, fmt.Errorf("select events to prune: %w", err)
	}
	if len(ids) == 0 {
		return false, nil
	}
	*cursor = ids[len(ids)-1]
	// Write.
	return true, pruneEvents(ctx, tx, ids, nil, counts)
}

// workflowBatch deletes the next batch of prunable workflow runs with
// their steps and events.
func (p *prunePass) workflowBatch(ctx context.Context, tx pgx.Tx, cursor *uuid.UUID, counts map[string]int64) (bool, error) {
	// Load: the next prunable workflow runs and their events.
	rows, err := tx.Query(ctx, prunableWorkflowRunsSQL, p.cuts.args(*cursor, int64(p.batch)))
	if err != nil {
		return false, fmt.Errorf("select workflow runs to prune: %w", err)
	}
	var cands []workflowPruneCandidate
	for rows.Next() {
		var c workflowPruneCandidate
		if err := rows.Scan(&c.id, &c.events); err != nil {
			rows.Close()
			return false, fmt.Errorf("select workflow runs to prune: %w", err)
		}
		cands = append(cands, c)
	}
	if err := rows.Err(); err != nil {
		return false, fmt.Errorf("select workflow runs to prune: %w", err)
	}
	if len(cands) == 0 {
		return false, nil
	}
	// Plan: as many as fit in one batch of events.
	runs, events := planWorkflowPrune(cands, p.batch)
	*cursor = runs[len(runs)-1]
	// Write.
	return true, pruneEvents(ctx, tx, events, runs, counts)
}

// workflowPruneCandidate is a prunable workflow run and its events.
type workflowPruneCandidate struct {
	id     uuid.UUID
	events []uuid.UUID
}

// planWorkflowPrune takes workflow runs in order while their events fit in
// a batch of n (the first always, whatever its size: a workflow run and
// its events go together).
func planWorkflowPrune(cands []workflowPruneCandidate, n int) (runs, events []uuid.UUID) {
	for i, c := range cands {
		if i > 0 && len(events)+len(c.events) > n {
			break
		}
		runs = append(runs, c.id)
		events = append(events, c.events...)
	}
	return runs, events
}

// pruneEvents deletes events with their attempts, dead letters and runs,
// and the workflow runs (with their steps) given, children first.
func pruneEvents(ctx context.Context, tx pgx.Tx, events, workflowRuns []uuid.UUID, counts map[string]int64) error {
	stmts := []struct {
		table, sql string
		ids        []uuid.UUID
	}{
		{"workflow_steps", `DELETE FROM converge_workflow_steps WHERE workflow_run_id = ANY($1)`, workflowRuns},
		{"attempts", `DELETE FROM converge_attempts WHERE run_id IN (SELECT id FROM converge_runs WHERE event_id = ANY($1))`, events},
		{"dead_letters", `DELETE FROM converge_dead_letters WHERE event_id = ANY($1)`, events},
		{"runs", `DELETE FROM converge_runs WHERE event_id = ANY($1)`, events},
		{"events", `DELETE FROM converge_events WHERE id = ANY($1)`, events},
		{"workflow_runs", `DELETE FROM converge_workflow_runs WHERE id = ANY($1)`, workflowRuns},
	}
	for _, st := range stmts {
		if len(st.ids) == 0 {
			continue
		}
		tag, err := tx.Exec(ctx, st.sql, st.ids)
		if err != nil {
			return fmt.Errorf("prune %s: %w", st.table, err)
		}
		counts[st.table] += tag.RowsAffected()
	}
	return nil
}

// deadLetterBatch deletes the next batch of dead letters resolved before
// the dead-letter cutoff, whatever becomes of their events.
func (p *prunePass) deadLetterBatch(ctx context.Context, tx pgx.Tx, _ *uuid.UUID, counts map[string]int64) (bool, error) {
	tag, err := tx.Exec(ctx, `DELETE FROM converge_dead_letters WHERE id IN (
		SELECT id FROM converge_dead_letters WHERE status <> 'open' AND resolved_at < $1 ORDER BY resolved_at LIMIT $2)`,
		p.cuts.deadLetters, p.batch)
	if err != nil {
		return false, fmt.Errorf("prune resolved dead letters: %w", err)
	}
	counts["dead_letters"] += tag.RowsAffected()
	return tag.RowsAffected() > 0, nil
}

// timedBatch returns the batch that deletes rows of table whose column
// at is before cut, in id order (their ids are time-ordered).
func (p *prunePass) timedBatch(name, table, at string, cut *time.Time) func(context.Context, pgx.Tx, *uuid.UUID, map[string]int64) (bool, error) {
	return func(ctx context.Context, tx pgx.Tx, cursor *uuid.UUID, counts map[string]int64) (bool, error) {
		var last *uuid.UUID
		var n int64
		err := tx.QueryRow(ctx, `WITH d AS (DELETE FROM `+table+` WHERE id IN (
			SELECT id FROM `+table+` WHERE id > $1 AND id < $2 AND `+at+` < $3 ORDER BY id LIMIT $4) RETURNING id)
			SELECT (SELECT id FROM d ORDER BY id DESC LIMIT 1), (SELECT count(*) FROM d)`, *cursor, idBefore(*cut), cut, p.batch).Scan(&last, &n)
		if err != nil {
			return false, fmt.Errorf("prune %s: %w", name, err)
		}
		counts[name] += n
		if last != nil {
			*cursor = *last
		}
		return n > 0, nil
	}
}

// pruneCount counts what a pass at cuts would delete, in one read-only
// snapshot.
func (s *Store) pruneCount(ctx context.Context, c pruneCutoffs) (*converge.PruneResult, error) {
	res := converge.NewPruneResult(true)
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, fmt.Errorf("prune dry run: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	// The workflow runs a pass would delete, and the events: theirs that go
	// with them, and plain ones (disjoint: a plain one's workflow run is
	// gone already).
	if c.workflowRuns != nil || c.runs != nil {
		wfSQL := `SELECT NULL::uuid, NULL::uuid[] WHERE false`
		if c.workflowRuns != nil {
			wfSQL = prunableWorkflowRunsSQL
		}
		plain := `SELECT NULL::uuid AS id WHERE false`
		if c.runs != nil {
			plain = plainPrunableEventsSQL
		}
		q := `WITH wf (wid, events) AS (` + wfSQL + `),
		ev (id) AS (SELECT unnest(events) FROM wf UNION ALL SELECT p.id FROM (` + plain + `) p)
		SELECT (SELECT count(*) FROM ev),
		       (SELECT count(*) FROM converge_runs r WHERE r.event_id IN (SELECT id FROM ev)),
		       (SELECT count(*) FROM converge_attempts a JOIN converge_runs r ON r.id = a.run_id WHERE r.event_id IN (SELECT id FROM ev)),
		       (SELECT count(*) FROM converge_dead_letters d WHERE d.event_id IN (SELECT id FROM ev)
		           OR (@dl_cut::timestamptz IS NOT NULL AND d.status <> 'open' AND d.resolved_at < @dl_cut)),
		       (SELECT count(*) FROM wf),
		       (SELECT count(*) FROM converge_workflow_steps st WHERE st.workflow_run_id IN (SELECT wid FROM wf))`
		args := c.args(uuid.Nil, math.MaxInt64)
		var ev, runs, attempts, dls, wf, steps int64
		if err := tx.QueryRow(ctx, q, args).Scan(&ev, &runs, &attempts, &dls, &wf, &steps); err != nil {
			return nil, fmt.Errorf("prune dry run: count events: %w", err)
		}
		res.Add("events", ev)
		res.Add("runs", runs)
		res.Add("attempts", attempts)
		res.Add("dead_letters", dls)
		res.Add("workflow_runs", wf)
		res.Add("workflow_steps", steps)
	} else if c.deadLetters != nil {
		var n int64
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM converge_dead_letters WHERE status <> 'open' AND resolved_at < $1`, c.deadLetters).Scan(&n); err != nil {
			return nil, fmt.Errorf("prune dry run: count dead letters: %w", err)
		}
		res.Add("dead_letters", n)
	}
	for _, t := range []struct {
		name, table, at string
		cut             *time.Time
	}{{"deliveries", "converge_deliveries", "received_at", c.deliveries}, {"audit", "converge_audit", "at", c.audit}} {
		if t.cut == nil {
			continue
		}
		var n int64
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM `+t.table+` WHERE `+t.at+` < $1`, t.cut).Scan(&n); err != nil {
			return nil, fmt.Errorf("prune dry run: count %s: %w", t.name, err)
		}
		res.Add(t.name, n)
	}
	return res, nil
}

// cutOr returns *t, or def when t is nil.
func cutOr(t *time.Time, def time.Time) time.Time {
	if t == nil {
		return def
	}
	return *t
}
