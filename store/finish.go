package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/converge-run/converge"
)

// Finishing an attempt: load (lock the stream, then the run, and read the
// lease, the run and the attempt) → plan (pure: planFinish) → write. A plain
// success is written by the same four statements whether one attempt
// finishes (its row given as VALUES) or many (unnest); every other outcome
// by the plan's statements. AttemptFinish is the path of one call,
// AttemptFinishMany of several in one transaction.

// AttemptFinishParams is the result of one call.
type AttemptFinishParams struct {
	Run *converge.Run
	// JobID is the River job the attempt ran in, deleted when the finish
	// ends the run (endedJobsDeleteStmt); 0 when there is none to delete.
	JobID   int64
	Attempt int
	Started time.Time
	// Err is nil on success; otherwise the classified error.
	Err        *converge.Error
	RetryAfter time.Duration
	Output     json.RawMessage
	// Interrupted is set when the call was stopped by this process shutting
	// down: the attempt is taken back and costs nothing.
	Interrupted bool
	// Abandoned is set when the worker stopped the call because it lost,
	// or could not renew, the stream's lease: the attempt is recorded
	// abandoned (with Err), as if the worker had vanished, and the run
	// moves on as after a transient error.
	Abandoned bool
	Backoff   converge.Backoff
}

// AttemptFinishResult tells the worker what follows.
type AttemptFinishResult struct {
	// Status is the run's status afterwards.
	Status converge.RunStatus
	// RetryIn is the backoff before the next attempt when Status is retrying.
	RetryIn time.Duration
	// Requeue asks for the job to be made available again at once (the
	// attempt was interrupted by shutdown).
	Requeue bool
	// Outcome is the outcome recorded for the attempt; empty when none was
	// (the attempt was taken back, or had been closed already).
	Outcome converge.AttemptOutcome
	// Fenced is set when the store refused the worker's result as late:
	// the attempt had been closed already (abandoned, after its lease was
	// lost), or its run had ended meanwhile (superseded or cancelled; the
	// attempt is then recorded cancelled).
	Fenced bool
}

// finishState is what finishing an attempt reads under the locks.
type finishState struct {
	ours     bool // the stream's lease is this attempt's
	status   converge.RunStatus
	attempts int
	open     bool // the attempt has no outcome yet
}

// finishStreamCols is whether the lease of the stream (aliased s) is
// attempt (%[1]s, %[2]s)'s.
const finishStreamCols = `coalesce(s.lease_run_id = %[1]s AND s.lease_attempt = %[2]s, false)`

// finishPlan is what finishing an attempt does, decided from the state
// under the locks: the result, the writes, whether a run waiting for the
// lease is woken, and whether it is the plain success, which is written
// by successWrites instead of writes.
type finishPlan struct {
	res     *AttemptFinishResult
	writes  []stmt
	wake    bool
	success bool
}

// planFinish decides what finishing attempt p does, given st.
func planFinish(p AttemptFinishParams, st finishState) finishPlan {
	run := p.Run
	res := &AttemptFinishResult{Status: st.status}
	plan := finishPlan{res: res}
	if !st.open {
		// Someone recorded this attempt already (abandoned after a lost
		// lease); the run has moved on without us.
		res.Fenced = true
		return plan
	}
	if st.status.Terminal() {
		res.Outcome, res.Fenced = converge.OutcomeCancelled, true
		plan.writes = append(plan.writes, finishAttemptStmt(p, converge.OutcomeCancelled, p.Err))
		if st.ours {
			plan.writes = append(plan.writes, leaseReleaseStmt(run.Kind, run.Resource, run.ID))
		}
		plan.wake = true
		return plan
	}
	if p.Interrupted {
		next := converge.RunQueued
		if st.attempts > 1 {
			next = converge.RunRetrying
		}
		plan.writes = append(plan.writes,
			stmt{"take back attempt", `DELETE FROM converge_attempts WHERE run_id = $1 AND number = $2`, []any{run.ID, p.Attempt}},
			stmt{"take back attempt", `UPDATE converge_runs SET attempts = attempts - 1, status = $2 WHERE id = $1`, []any{run.ID, next}},
			leaseReleaseStmt(run.Kind, run.Resource, run.ID))
		res.Status, res.Requeue = next, true
		return plan
	}
	switch {
	case p.Err == nil:
		plan.success = true
		res.Status, res.Outcome = converge.RunSucceeded, converge.OutcomeSucceeded
		return plan
	case p.Err.Class == converge.ClassPermanent && !p.Abandoned || st.attempts >= run.MaxAttempts:
		outcome := converge.OutcomeTransientError
		switch {
		case p.Abandoned:
			outcome = converge.OutcomeAbandoned
		case p.Err.Class == converge.ClassPermanent:
			outcome = converge.OutcomePermanentError
		}
		res.Outcome = outcome
		plan.writes = append(plan.writes, finishAttemptStmt(p, outcome, p.Err),
			stmt{"mark run failed", `UPDATE converge_runs SET status = 'failed', finished_at = now(), error = $2, next_attempt_at = NULL
				WHERE id = $1`, []any{run.ID, p.Err}})
		res.Status = converge.RunFailed
	default:
		outcome := converge.OutcomeTransientError
		if p.Abandoned {
			outcome = converge.OutcomeAbandoned
		}
		res.RetryIn, res.Outcome = p.Backoff.Delay(st.attempts, p.RetryAfter), outcome
		plan.writes = append(plan.writes, finishAttemptStmt(p, outcome, p.Err),
			stmt{"mark run retrying", `UPDATE converge_runs SET status = 'retrying', error = $2,
				next_attempt_at = now() + $3 * interval '1 microsecond' WHERE id = $1`, []any{run.ID, p.Err, res.RetryIn.Microseconds()}})
		res.Status = converge.RunRetrying
	}
	if st.ours {
		plan.writes = append(plan.writes, leaseReleaseStmt(run.Kind, run.Resource, run.ID))
	}
	return plan
}

// attemptCloseSet closes an attempt (aliased a) with outcome %[1]s and
// error %[2]s.
var attemptCloseSet = `outcome = %[1]s, finished_at = now(), duration_ms = ` + durationSQL("a") + `, error = %[2]s`

func finishAttemptStmt(p AttemptFinishParams, outcome converge.AttemptOutcome, e *converge.Error) stmt {
	return stmt{"record attempt outcome", `UPDATE converge_attempts a SET ` + fmt.Sprintf(attemptCloseSet, "$3", "$4") + `
		WHERE run_id = $1 AND number = $2`, []any{p.Run.ID, p.Attempt, outcome, e}}
}

// successWrites records the plain successes ps[i] for i in ok (st[i] their
// states), each statement for all of them at once: the attempt closed, the
// run succeeded, the stream's applied version raised (G8: never lowered),
// its lease released and its failed streak and quarantine (SPEC §11)
// cleared in one write of its row, and older open dead
// letters of the stream superseded. One success is given as VALUES, more
// through unnest: the statements are otherwise the same.
func successWrites(ps []AttemptFinishParams, st []finishState, ok []int) []stmt {
	n := len(ok)
	runIDs, numbers := make([]uuid.UUID, n), make([]int64, n)
	outputs := make([]*string, n)
	kinds, resources, versions := make([]string, n), make([]string, n), make([]int64, n)
	ours := make([]bool, n)
	for x, i := range ok {
		p := ps[i]
		runIDs[x], numbers[x] = p.Run.ID, int64(p.Attempt)
		if len(p.Output) > 0 {
			o := string(p.Output)
			outputs[x] = &o
		}
		kinds[x], resources[x], versions[x] = p.Run.Kind, p.Run.Resource, p.Run.Version
		ours[x] = st[i].ours
	}
	// rows is the source of the rows named cols, of the types given.
	rows := func(cols string, types ...string) string {
		if n == 1 {
			vals := ""
			for i, t := range types {
				if i > 0 {
					vals += ", "
				}
				vals += fmt.Sprintf("$%d::%s", i+1, t)
			}
			return "(VALUES (" + vals + ")) u(" + cols + ")"
		}
		vals := ""
		for i, t := range types {
			if i > 0 {
				vals += ", "
			}
			vals += fmt.Sprintf("$%d::%s[]", i+1, t)
		}
		return "unnest(" + vals + ") u(" + cols + ")"
	}
	// colArgs are the columns' values as query arguments; args picks some.
	var colArgs []any
	if n == 1 {
		colArgs = []any{runIDs[0], numbers[0], outputs[0], kinds[0], resources[0], versions[0], ours[0]}
	} else {
		colArgs = []any{uuids(runIDs), numbers, outputs, kinds, resources, versions, ours}
	}
	args := func(cols ...int) []any {
		out := make([]any, len(cols))
		for j, c := range cols {
			out[j] = colArgs[c]
		}
		return out
	}
	const cRun, cNumber, cOutput, cKind, cResource, cVersion, cOurs = 0, 1, 2, 3, 4, 5, 6
	return []stmt{
		{"record attempt outcome", `UPDATE converge_attempts a SET ` + fmt.Sprintf(attemptCloseSet, "'succeeded'", "NULL") + `
			FROM ` + rows("run, n", "uuid", "bigint") + ` WHERE a.run_id = u.run AND a.number = u.n`,
			args(cRun, cNumber)},
		{"mark run succeeded", `UPDATE converge_runs r SET status = 'succeeded', finished_at = now(), output = u.o::jsonb, error = NULL
			FROM ` + rows("id, o", "uuid", "text") + ` WHERE r.id = u.id`,
			args(cRun, cOutput)},
		{"raise applied version and release lease", `UPDATE converge_streams s SET
				applied_version = greatest(s.applied_version, u.v),
				applied_at = CASE WHEN coalesce(s.applied_version, 0) < u.v THEN now() ELSE s.applied_at END,
				lease_run_id = CASE WHEN u.ours AND s.lease_run_id = u.run THEN NULL ELSE s.lease_run_id END,
				lease_attempt = CASE WHEN u.ours AND s.lease_run_id = u.run THEN NULL ELSE s.lease_attempt END,
				lease_expires_at = CASE WHEN u.ours AND s.lease_run_id = u.run THEN NULL ELSE s.lease_expires_at END,
				failed_streak = 0, quarantined_at = NULL
			FROM ` + rows("k, r, v, run, ours", "text", "text", "bigint", "uuid", "bool") + `
			WHERE s.kind = u.k AND s.resource = u.r
			  AND (coalesce(s.applied_version, 0) < u.v OR u.ours AND s.lease_run_id = u.run
			       OR s.failed_streak <> 0 OR s.quarantined_at IS NOT NULL)`,
			args(cKind, cResource, cVersion, cRun, cOurs)},
		{"supersede dead letters", `UPDATE converge_dead_letters d SET status = 'superseded', superseded_by_version = u.v,
				resolved_at = now(), resolved_by = 'converge'
			FROM ` + rows("k, r, v", "text", "text", "bigint") + `
			WHERE d.kind = u.k AND d.resource = u.r AND d.status = 'open' AND d.version < u.v`,
			args(cKind, cResource, cVersion)},
	}
}

// finishWrites are the statements of plans (of ps, with states st), in
// order: every plan's own writes, then the plain successes set-based.
func finishWrites(ps []AttemptFinishParams, st []finishState, plans []finishPlan) []stmt {
	var writes []stmt
	var ok []int
	for i, plan := range plans {
		if plan.success {
			ok = append(ok, i)
			continue
		}
		writes = append(writes, plan.writes...)
	}
	if len(ok) > 0 {
		writes = append(writes, successWrites(ps, st, ok)...)
	}
	return writes
}

// AttemptFinish records how an attempt ended and moves the run on: to
// succeeded (raising the stream's applied version), retrying, or failed
// (which writes its dead letter). A late result for a run that was superseded
// or cancelled meanwhile is recorded as a cancelled attempt and changes
// nothing else. It releases the stream's lease and wakes a run waiting for
// it.
func (s *Store) AttemptFinish(ctx context.Context, p AttemptFinishParams) (*AttemptFinishResult, error) {
	var plan finishPlan
	var wfs []workflowStatus
	var tally acceptTally
	run := p.Run
	// A workflow step's success locks other streams than its own (the
	// next steps'): inTxRetry runs the finish again if it deadlocked.
	err := s.inTxRetry(ctx, func(tx pgx.Tx) error {
		wfs, tally = nil, acceptTally{} // of a try that failed
		// Load: the locks (stream, then run) and the attempt's state in one
		// round trip, in that order.
		var b pgx.Batch
		b.Queue(lockStreamSQL(fmt.Sprintf(finishStreamCols, "$3", "$4")), run.Kind, run.Resource, run.ID, p.Attempt)
		b.Queue(`SELECT status, attempts FROM converge_runs WHERE id = $1 FOR UPDATE`, run.ID)
		b.Queue(`SELECT outcome IS NULL FROM converge_attempts WHERE run_id = $1 AND number = $2`, run.ID, p.Attempt)
		br := tx.SendBatch(ctx, &b)
		var st finishState
		if err := br.QueryRow().Scan(&st.ours); err != nil {
			_ = br.Close()
			return fmt.Errorf("lock stream: %w", err)
		}
		if err := br.QueryRow().Scan(&st.status, &st.attempts); err != nil {
			_ = br.Close()
			return fmt.Errorf("lock run: %w", err)
		}
		err := br.QueryRow().Scan(&st.open)
		if cerr := br.Close(); err == nil && cerr != nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("find attempt: %w", err)
		}
		// Plan and write.
		plan = planFinish(p, st)
		ps, sts, plans := []AttemptFinishParams{p}, []finishState{st}, []finishPlan{plan}
		if err := execAll(ctx, tx, finishWrites(ps, sts, plans)...); err != nil {
			return err
		}
		if err := s.finishFollowUps(ctx, tx, &tally, ps, plans); err != nil {
			return err
		}
		if run.WorkflowRunID != nil {
			wfs, err = s.workflowStatusesTx(ctx, tx)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("finish attempt %d of run %s: %w", p.Attempt, run.ID, err)
	}
	s.reportWorkflowStatuses(wfs)
	s.reportAccepts(&tally)
	return plan.res, nil
}

// AttemptFinishMany finishes attempts of distinct streams in one
// transaction: the streams, runs and attempts are locked and read in one
// round trip (streams first, in the lock order), and the writes go out in
// a second, successes as set-based statements and every other outcome as
// it would alone. An error means the transaction failed as a whole; the
// caller then finishes each attempt with AttemptFinish.
func (s *Store) AttemptFinishMany(ctx context.Context, ps []AttemptFinishParams) ([]*AttemptFinishResult, error) {
	res := make([]*AttemptFinishResult, len(ps))
	var wfs []workflowStatus
	var tally acceptTally
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if err := s.attemptFinishMany(ctx, tx, &tally, ps, res); err != nil {
			return err
		}
		var err error
		if slices.ContainsFunc(ps, func(p AttemptFinishParams) bool { return p.Run.WorkflowRunID != nil }) {
			wfs, err = s.workflowStatusesTx(ctx, tx)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("finish %d attempts: %w", len(ps), err)
	}
	// Only a committed batch is reported (one that failed as a whole is
	// redone one attempt at a time, each reporting its own).
	s.reportWorkflowStatuses(wfs)
	s.reportAccepts(&tally)
	return res, nil
}

func (s *Store) attemptFinishMany(ctx context.Context, tx pgx.Tx, t *acceptTally, reqs []AttemptFinishParams, res []*AttemptFinishResult) error {
	// Load.
	n := len(reqs)
	kinds, resources := make([]string, n), make([]string, n)
	runIDs, attempts := make([]uuid.UUID, n), make([]int64, n)
	byRun := make(map[uuid.UUID]int, n)
	for i, p := range reqs {
		kinds[i], resources[i], runIDs[i], attempts[i] = p.Run.Kind, p.Run.Resource, p.Run.ID, int64(p.Attempt)
		byRun[p.Run.ID] = i
	}
	runIDArg := uuids(runIDs)
	var b pgx.Batch
	queue(&b, []stmt{indexPlansOn})
	b.Queue(lockStreamsSQL(fmt.Sprintf(finishStreamCols, "u.run", "u.a"), "run", "uuid[]", "a", "bigint[]"),
		kinds, resources, runIDArg, attempts)
	b.Queue(`SELECT id, status, attempts FROM converge_runs WHERE id = ANY($1) ORDER BY id FOR UPDATE`, runIDArg)
	b.Queue(`SELECT a.run_id FROM converge_attempts a JOIN unnest($1::uuid[], $2::bigint[]) u(run, n)
		ON a.run_id = u.run AND a.number = u.n WHERE a.outcome IS NULL`, runIDArg, attempts)
	br := tx.SendBatch(ctx, &b)
	states := make([]finishState, n)
	found := make([]bool, n)
	err := execResults(br, []stmt{indexPlansOn})
	if err == nil {
		err = scanEach(br, func(row pgx.Rows) error {
			var i int64
			var ours bool
			if err := row.Scan(&i, &ours); err != nil {
				return err
			}
			states[i-1].ours, found[i-1] = ours, true
			return nil
		})
	}
	if err == nil {
		err = scanEach(br, func(row pgx.Rows) error {
			var id uuid.UUID
			var st converge.RunStatus
			var a int
			if err := row.Scan(uuidDest(&id), &st, &a); err != nil {
				return err
			}
			states[byRun[id]].status, states[byRun[id]].attempts = st, a
			return nil
		})
	}
	if err == nil {
		err = scanEach(br, func(row pgx.Rows) error {
			var id uuid.UUID
			if err := row.Scan(uuidDest(&id)); err != nil {
				return err
			}
			states[byRun[id]].open = true
			return nil
		})
	}
	if cerr := br.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("lock streams and runs: %w", err)
	}
	if slices.Contains(found, false) || slices.ContainsFunc(states, func(st finishState) bool { return st.status == "" }) {
		return fmt.Errorf("finish attempts: a stream or run is missing")
	}

	// Plan, in lock order, and write in one round trip.
	order := sortStreams(n, func(i int) (string, string) { return kinds[i], resources[i] })
	plans := make([]finishPlan, n)
	ps, sts := make([]AttemptFinishParams, n), make([]finishState, n)
	for j, i := range order {
		plans[j] = planFinish(reqs[i], states[i])
		ps[j], sts[j] = reqs[i], states[i]
		res[i] = plans[j].res
	}
	if err := execAll(ctx, tx, append(finishWrites(ps, sts, plans), indexPlansOff)...); err != nil {
		return err
	}
	return s.finishFollowUps(ctx, tx, t, ps, plans)
}

// finishFollowUps does, after the writes of plans (of ps), what follows
// from them in the same transaction: a run waiting for a released lease is
// woken, a workflow step's success moves its workflow run on
// (workflowAdvance: its next steps are accepted now, so that a crash
// between the success and the next step is impossible), what a run
// ending failed caused is notified (notifyRunsFailed), and, last, the
// River jobs of the runs that ended are deleted (endedJobsDeleteStmt).
// The steps accepted, and the runs they supersede, are noted in t.
func (s *Store) finishFollowUps(ctx context.Context, tx pgx.Tx, t *acceptTally, ps []AttemptFinishParams, plans []finishPlan) error {
	var failed []uuid.UUID
	var ended []int64
	for j, plan := range plans {
		r := ps[j].Run
		if plan.res.Status == converge.RunFailed && !plan.res.Fenced {
			failed = append(failed, r.ID)
		}
		if plan.res.Status.Terminal() && !plan.res.Fenced && ps[j].JobID != 0 {
			ended = append(ended, ps[j].JobID)
		}
		if plan.wake {
			if err := s.wakeWaiting(ctx, tx, r.Kind, r.Resource, r.ID); err != nil {
				return err
			}
		}
		if plan.success && r.WorkflowRunID != nil {
			if err := s.workflowAdvance(ctx, tx, t, *r.WorkflowRunID); err != nil {
				return err
			}
		}
	}
	// The failed runs' dead letters, workflow runs and quarantines.
	if err := s.notifyRunsFailed(ctx, tx, failed); err != nil {
		return err
	}
	if len(ended) == 0 {
		return nil
	}
	return execAll(ctx, tx, endedJobsDeleteStmt(ended))
}

// wakeWaiting makes the job of the stream's waiting run (other than runID)
// available at once, so that a run waiting for the lease does not sleep out
// its wait.
func (s *Store) wakeWaiting(ctx context.Context, tx pgx.Tx, kind, resource string, runID uuid.UUID) error {
	var job *int64
	err := tx.QueryRow(ctx, `SELECT job_id FROM converge_runs WHERE kind = $1 AND resource = $2
		AND finished_at IS NULL AND status IN `+waitingSQL+` AND id <> $3`, kind, resource, runID).Scan(&job)
	if errors.Is(err, pgx.ErrNoRows) || job == nil {
		return nil
	}
	if err != nil {
		return fmt.Errorf("find waiting run: %w", err)
	}
	return s.jobWake(ctx, tx, *job)
}
