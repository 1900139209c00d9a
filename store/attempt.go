package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/converge-run/converge"
)

// Decision is what a worker must do with a run's job.
type Decision int

// Decisions of AttemptBegin.
const (
	// DecisionDone: the run needs nothing more from this job (it is
	// finished, superseded, or driven by a newer job).
	DecisionDone Decision = iota
	// DecisionWait: another attempt of the stream is in flight; try again
	// after Wait (a finishing holder wakes the job earlier).
	DecisionWait
	// DecisionCall: the attempt is recorded and the lease is ours; call the
	// target.
	DecisionCall
)

// AttemptTicket is the answer of AttemptBegin.
type AttemptTicket struct {
	Decision Decision
	Wait     time.Duration
	Run      *converge.Run
	Payload  json.RawMessage
	Attempt  int
	// LeaseFrom is a moment of this process's clock no later than the
	// database's start of the lease (the transaction's now()): the lease
	// lasts at least leaseTTL from LeaseFrom. It is read after a connection
	// was acquired, so waiting for the pool does not shorten it.
	LeaseFrom time.Time
}

// abandonedError is the error recorded for an attempt whose worker vanished.
var abandonedError = converge.Error{Class: converge.ClassTransient, Message: "the worker stopped during the attempt (process died or lost its lease)"}

// AttemptBegin starts the next attempt of a run if, and only if, the run is
// unfinished, driven by jobID, belongs to its stream's latest accepted
// version, and the stream's lease is free. It takes the lease for leaseTTL,
// records an attempt left open by a vanished worker as abandoned, and ends
// the run as failed when that abandoned attempt was its last.
//
// Concurrent calls are group-committed (see beginBatch).
func (s *Store) AttemptBegin(ctx context.Context, runID uuid.UUID, jobID int64, leaseTTL time.Duration) (*AttemptTicket, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return s.begins.do(beginRequest{runID: runID, jobID: jobID, leaseTTL: leaseTTL})
}

// beginRequest is a call of AttemptBegin.
type beginRequest struct {
	runID    uuid.UUID
	jobID    int64
	leaseTTL time.Duration
}

// beginState is what AttemptBegin reads under the stream's and the run's
// locks.
type beginState struct {
	kind, resource string
	latest         int64 // the stream's latest accepted version
	held           bool  // the stream's lease is taken and unexpired
	remainingMS    int64 // how long it still is
	run            *converge.Run
	runJob         *int64
	payload        []byte
	open           bool  // an attempt of the run has no outcome: its worker vanished
	debounceMS     int64 // how long the run's first attempt is still held back
}

// openAttemptSQL tells whether run r has an attempt without an outcome
// (its worker vanished). Only the run's latest attempt can be open: an
// attempt begins only after the one before it was closed, in the same
// transaction, and one taken back is deleted with the count lowered. So it
// is looked up by its whole key, one index probe whatever the plan.
const openAttemptSQL = `EXISTS (SELECT 1 FROM converge_attempts a WHERE a.run_id = r.id AND a.number = r.attempts AND a.outcome IS NULL)`

// debounceSQL is how long the first attempt of run r is still held back
// (EventAcceptParams.Debounce), in milliseconds.
const debounceSQL = `CASE WHEN r.attempts = 0 THEN coalesce(greatest(extract(epoch FROM r.next_attempt_at - now()) * 1000, 0), 0) ELSE 0 END::bigint`

// beginPlan is what AttemptBegin does, decided from the state: the ticket
// and its writes. A call (Decision DecisionCall) has its writes made by
// callWrites or, in a batch, set-based.
type beginPlan struct {
	ticket *AttemptTicket
	writes []stmt
}

// abandonSQL records as abandoned an attempt of run $1 left open by a
// worker that vanished.
const abandonSQL = `UPDATE converge_attempts SET outcome = 'abandoned', finished_at = now(),
		duration_ms = (extract(epoch FROM now() - started_at) * 1000)::bigint, error = $2
	WHERE run_id = $1 AND outcome IS NULL`

// planBegin decides what AttemptBegin does for job jobID, given st.
func planBegin(st *beginState, jobID int64) beginPlan {
	t := &AttemptTicket{Decision: DecisionDone}
	plan := beginPlan{ticket: t}
	run := st.run
	if run.Status.Terminal() || st.runJob == nil || *st.runJob != jobID {
		return plan
	}
	if run.Version < st.latest {
		// Unreachable while acceptance supersedes in its own transaction;
		// kept so that an older version can never reach the target.
		plan.writes = append(plan.writes, stmt{"supersede run", `UPDATE converge_runs SET status = 'superseded', finished_at = now(), next_attempt_at = NULL WHERE id = $1`, []any{run.ID}})
		return plan
	}
	if st.held {
		t.Decision = DecisionWait
		t.Wait = min(max(time.Duration(st.remainingMS)*time.Millisecond, 10*time.Millisecond), 2*time.Second)
		return plan
	}
	if st.debounceMS > 0 {
		t.Decision = DecisionWait
		t.Wait = time.Duration(st.debounceMS) * time.Millisecond
		return plan
	}
	if st.open && run.Attempts >= run.MaxAttempts {
		plan.writes = append(plan.writes,
			stmt{"record abandoned attempt", abandonSQL, []any{run.ID, abandonedError}},
			stmt{"fail run", `UPDATE converge_runs SET status = 'failed', finished_at = now(), next_attempt_at = NULL, error = $2
				WHERE id = $1`, []any{run.ID, abandonedError}},
			leaseReleaseStmt(st.kind, st.resource, run.ID))
		return plan
	}
	if st.open {
		plan.writes = append(plan.writes, stmt{"record abandoned attempt", abandonSQL, []any{run.ID, abandonedError}})
	}
	t.Decision, t.Payload, t.Attempt = DecisionCall, st.payload, run.Attempts+1
	return plan
}

// attemptBeginOne is AttemptBegin in a transaction of its own.
func (s *Store) attemptBeginOne(ctx context.Context, r beginRequest) (*AttemptTicket, error) {
	var t *AttemptTicket
	var from time.Time
	err := s.inTxFrom(ctx, &from, func(tx pgx.Tx) error {
		t = &AttemptTicket{Decision: DecisionDone}
		// Lock order everywhere: stream row, then run row. Both locks go
		// out in one round trip; the run's lock is taken, and its snapshot
		// read, after the stream's.
		var b pgx.Batch
		b.Queue(`SELECT kind, resource, latest_version,
				coalesce(lease_expires_at > now(), false),
				coalesce(greatest(extract(epoch FROM lease_expires_at - now()) * 1000, 0), 0)::bigint
			FROM converge_streams WHERE (kind, resource) = (SELECT kind, resource FROM converge_runs WHERE id = $1)
			FOR UPDATE`, r.runID)
		// open: an attempt of the run left open by a worker that vanished.
		// Attempts of a run change only under its stream's lock (or once
		// it is terminal), so this read is current.
		b.Queue(`SELECT `+runColumns+`, r.job_id, e.payload,
				`+openAttemptSQL+`, `+debounceSQL+`
			FROM converge_runs r JOIN converge_events e ON e.id = r.event_id WHERE r.id = $1 FOR UPDATE OF r`, r.runID)
		br := tx.SendBatch(ctx, &b)
		var st beginState
		err := br.QueryRow().Scan(&st.kind, &st.resource, &st.latest, &st.held, &st.remainingMS)
		if errors.Is(err, pgx.ErrNoRows) {
			// No such run.
			return br.Close()
		}
		if err != nil {
			_ = br.Close()
			return fmt.Errorf("lock stream: %w", err)
		}
		st.run, err = scanRunWith(br.QueryRow(), &st.runJob, &st.payload, &st.open, &st.debounceMS)
		if cerr := br.Close(); err == nil && cerr != nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("lock run: %w", err)
		}
		plan := planBegin(&st, r.jobID)
		t = plan.ticket
		if t.Decision != DecisionCall {
			return execAll(ctx, tx, plan.writes...)
		}
		// The attempt's writes go out in one round trip.
		b = pgx.Batch{}
		for _, w := range plan.writes {
			b.Queue(w.sql, w.args...)
		}
		b.Queue(`UPDATE converge_runs r SET status = 'running', attempts = $2,
				started_at = coalesce(started_at, now()), next_attempt_at = NULL
			WHERE id = $1 RETURNING `+runColumns, r.runID, t.Attempt)
		// started_at from the clock under the stream lock, like an event's
		// received_at: attempts and acceptances of a stream are then
		// ordered by time as they are by the lock.
		b.Queue(`INSERT INTO converge_attempts (run_id, number, started_at) VALUES ($1, $2, clock_timestamp())`, r.runID, t.Attempt)
		b.Queue(`UPDATE converge_streams SET lease_run_id = $3, lease_attempt = $4,
				lease_expires_at = now() + $5 * interval '1 microsecond' WHERE kind = $1 AND resource = $2`,
			st.kind, st.resource, r.runID, t.Attempt, r.leaseTTL.Microseconds())
		br = tx.SendBatch(ctx, &b)
		defer func() { _ = br.Close() }()
		for _, w := range plan.writes {
			if _, err := br.Exec(); err != nil {
				return fmt.Errorf("%s: %w", w.what, err)
			}
		}
		t.Run, err = scanRun(br.QueryRow())
		if err != nil {
			return fmt.Errorf("mark run running: %w", err)
		}
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("record attempt: %w", err)
		}
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("take lease: %w", err)
		}
		if err := br.Close(); err != nil {
			return fmt.Errorf("begin attempt: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("begin attempt of run %s: %w", r.runID, err)
	}
	t.LeaseFrom = from
	return t, nil
}

func scanRunWith(row pgx.Row, extra ...any) (*converge.Run, error) {
	var r converge.Run
	var output []byte
	dest := append([]any{&r.ID, &r.EventID, &r.Number, &r.Status, &r.Attempts, &r.MaxAttempts, &r.NextAttemptAt,
		&r.CreatedAt, &r.StartedAt, &r.FinishedAt, &r.Error, &output, &r.Kind, &r.Resource, &r.Version}, extra...)
	if err := row.Scan(dest...); err != nil {
		return nil, err
	}
	if output != nil {
		r.Output = output
	}
	utcRun(&r)
	return &r, nil
}

// inTxFrom is inTx that sets *from to this process's clock just before the
// transaction's BEGIN is sent, after a connection was acquired: the
// transaction's now() is no earlier.
func (s *Store) inTxFrom(ctx context.Context, from *time.Time, fn func(pgx.Tx) error) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("acquire connection: %w", err)
	}
	defer conn.Release()
	*from = time.Now()
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

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

// AttemptFinishParams is the result of one call.
type AttemptFinishParams struct {
	Run     *converge.Run
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
}

// AttemptFinish records how an attempt ended and moves the run on: to
// succeeded (raising the stream's applied version), retrying, or failed
// (which writes its dead letter). A late result for a run that was superseded
// or cancelled meanwhile is recorded as a cancelled attempt and changes
// nothing else. It releases the stream's lease and wakes a run waiting for
// it.
//
// Concurrent calls are group-committed (see finishBatch).
func (s *Store) AttemptFinish(ctx context.Context, p AttemptFinishParams) (*AttemptFinishResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return s.finishes.do(p)
}

// finishState is what AttemptFinish reads under the locks.
type finishState struct {
	ours     bool // the stream's lease is this attempt's
	status   converge.RunStatus
	attempts int
	open     bool // the attempt has no outcome yet
}

// finishPlan is what AttemptFinish does, decided from the state under the
// locks: the result, the writes, and a step that cannot be a plain
// statement (waking a waiting run).
type finishPlan struct {
	res     *AttemptFinishResult
	writes  []stmt
	extra   func(ctx context.Context, tx pgx.Tx) error
	success bool // the plain success path, which finishBatch writes set-based
}

// attemptFinishOne is AttemptFinish in a transaction of its own.
func (s *Store) attemptFinishOne(ctx context.Context, p AttemptFinishParams) (*AttemptFinishResult, error) {
	var plan finishPlan
	run := p.Run
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		// Lock order everywhere: stream row, then run row. The locks and
		// the attempt's state are read in one round trip, in that order.
		var b pgx.Batch
		b.Queue(`SELECT coalesce(lease_run_id = $3 AND lease_attempt = $4, false)
			FROM converge_streams WHERE kind = $1 AND resource = $2 FOR UPDATE`,
			run.Kind, run.Resource, run.ID, p.Attempt)
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
		plan = s.planFinish(p, st)
		if err := execAll(ctx, tx, plan.writes...); err != nil {
			return err
		}
		if plan.extra != nil {
			return plan.extra(ctx, tx)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("finish attempt %d of run %s: %w", p.Attempt, run.ID, err)
	}
	return plan.res, nil
}

// planFinish decides what finishing attempt p does, given st.
func (s *Store) planFinish(p AttemptFinishParams, st finishState) finishPlan {
	run := p.Run
	res := &AttemptFinishResult{Status: st.status}
	plan := finishPlan{res: res}
	if !st.open {
		// Someone recorded this attempt already (abandoned after a lost
		// lease); the run has moved on without us.
		return plan
	}
	if st.status.Terminal() {
		plan.writes = append(plan.writes, finishAttemptStmt(p, converge.OutcomeCancelled, p.Err))
		if st.ours {
			plan.writes = append(plan.writes, leaseReleaseStmt(run.Kind, run.Resource, run.ID))
		}
		plan.extra = func(ctx context.Context, tx pgx.Tx) error {
			return s.wakeWaiting(ctx, tx, run.Kind, run.Resource, run.ID)
		}
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
		plan.writes = append(plan.writes, finishAttemptStmt(p, converge.OutcomeSucceeded, nil),
			stmt{"mark run succeeded", `UPDATE converge_runs SET status = 'succeeded', finished_at = now(), output = $2, error = NULL
				WHERE id = $1`, []any{run.ID, outputArg(p.Output)}},
			stmt{"raise applied version", `UPDATE converge_streams SET applied_version = $3, applied_at = now()
				WHERE kind = $1 AND resource = $2 AND coalesce(applied_version, 0) < $3`, []any{run.Kind, run.Resource, run.Version}},
			stmt{"supersede dead letters", `UPDATE converge_dead_letters SET status = 'superseded', superseded_by_version = $3,
					resolved_at = now(), resolved_by = 'converge'
				WHERE kind = $1 AND resource = $2 AND status = 'open' AND version < $3`, []any{run.Kind, run.Resource, run.Version}})
		res.Status = converge.RunSucceeded
	case p.Err.Class == converge.ClassPermanent && !p.Abandoned || st.attempts >= run.MaxAttempts:
		outcome := converge.OutcomeTransientError
		switch {
		case p.Abandoned:
			outcome = converge.OutcomeAbandoned
		case p.Err.Class == converge.ClassPermanent:
			outcome = converge.OutcomePermanentError
		}
		plan.writes = append(plan.writes, finishAttemptStmt(p, outcome, p.Err),
			stmt{"mark run failed", `UPDATE converge_runs SET status = 'failed', finished_at = now(), error = $2, next_attempt_at = NULL
				WHERE id = $1`, []any{run.ID, p.Err}})
		res.Status = converge.RunFailed
	default:
		outcome := converge.OutcomeTransientError
		if p.Abandoned {
			outcome = converge.OutcomeAbandoned
		}
		res.RetryIn = p.Backoff.Delay(st.attempts, p.RetryAfter)
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

// outputArg is a run's output as a query argument: NULL when empty.
func outputArg(out json.RawMessage) any {
	if len(out) == 0 {
		return nil
	}
	return []byte(out)
}

func finishAttemptStmt(p AttemptFinishParams, outcome converge.AttemptOutcome, e *converge.Error) stmt {
	return stmt{"record attempt outcome", `UPDATE converge_attempts SET outcome = $3, finished_at = now(),
			duration_ms = (extract(epoch FROM now() - started_at) * 1000)::bigint, error = $4
		WHERE run_id = $1 AND number = $2`, []any{p.Run.ID, p.Attempt, outcome, e}}
}

func (s *Store) leaseRelease(ctx context.Context, tx pgx.Tx, kind, resource string, runID uuid.UUID) error {
	return execAll(ctx, tx, leaseReleaseStmt(kind, resource, runID))
}

func leaseReleaseStmt(kind, resource string, runID uuid.UUID) stmt {
	return stmt{"release lease", `UPDATE converge_streams SET lease_run_id = NULL, lease_attempt = NULL, lease_expires_at = NULL
		WHERE kind = $1 AND resource = $2 AND lease_run_id = $3`, []any{kind, resource, runID}}
}

// stmt is a statement for execAll: what it does (for errors), its SQL and
// its arguments.
type stmt struct {
	what string
	sql  string
	args []any
}

// execAll runs stmts in tx, in order, in one round trip (a pgx batch; a
// single statement goes alone). The first error stops it and is returned
// with what its statement does.
func execAll(ctx context.Context, tx pgx.Tx, stmts ...stmt) error {
	if len(stmts) == 0 {
		return nil
	}
	if len(stmts) == 1 {
		if _, err := tx.Exec(ctx, stmts[0].sql, stmts[0].args...); err != nil {
			return fmt.Errorf("%s: %w", stmts[0].what, err)
		}
		return nil
	}
	var b pgx.Batch
	for _, st := range stmts {
		b.Queue(st.sql, st.args...)
	}
	br := tx.SendBatch(ctx, &b)
	for _, st := range stmts {
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			return fmt.Errorf("%s: %w", st.what, err)
		}
	}
	return br.Close()
}

// wakeWaiting makes the job of the stream's unfinished run (other than
// runID) available at once, so that a run waiting for the lease does not
// sleep out its wait.
func (s *Store) wakeWaiting(ctx context.Context, tx pgx.Tx, kind, resource string, runID uuid.UUID) error {
	var job *int64
	err := tx.QueryRow(ctx, `SELECT job_id FROM converge_runs WHERE kind = $1 AND resource = $2
		AND status IN ('queued', 'retrying') AND id <> $3`, kind, resource, runID).Scan(&job)
	if errors.Is(err, pgx.ErrNoRows) || job == nil {
		return nil
	}
	if err != nil {
		return fmt.Errorf("find waiting run: %w", err)
	}
	if _, err := s.river.JobRetryTx(ctx, tx, *job); err != nil && !isRiverNotFound(err) {
		return fmt.Errorf("wake job %d: %w", *job, err)
	}
	return nil
}

// RunReconcileParams tunes RunReconcile.
type RunReconcileParams struct {
	// StuckAfter is how long the job of a queued or retrying run may stay
	// running in River before it is taken as lost with its worker. Such a
	// job is never in a call (the run would be running); it is only ever
	// running for the moments around one, so rescue_after is a safe value.
	StuckAfter time.Duration
}

// RunReconcile gives a fresh job to runs whose worker vanished, so that
// they are picked up again within rescue_after rather than when River
// rescues the lost job (which waits past the longest attempt):
//   - running runs whose stream lease expired or went to another run; the
//     next attempt records the lost one abandoned;
//   - queued and retrying runs whose job has been running in River for
//     longer than p.StuckAfter: the worker died between fetching the job
//     and beginning an attempt, or between finishing an attempt and River
//     recording the job's snooze.
//
// The run's job_id is switched under the run's lock, and AttemptBegin
// ignores any job but the run's current one, so a worker that was only
// slow does nothing when it comes back. RunReconcile also records as
// abandoned the open attempts of finished runs whose worker vanished. It
// returns how many runs it rescued.
func (s *Store) RunReconcile(ctx context.Context, p RunReconcileParams) (int, error) {
	stuckAfter := p.StuckAfter.Microseconds()
	rows, err := s.pool.Query(ctx, `SELECT r.id FROM converge_runs r
			JOIN converge_streams s ON s.kind = r.kind AND s.resource = r.resource
			WHERE r.status = 'running' AND (s.lease_run_id IS DISTINCT FROM r.id OR s.lease_expires_at < now())
		UNION ALL
		SELECT r.id FROM converge_runs r JOIN river_job j ON j.id = r.job_id
			WHERE r.status IN ('queued', 'retrying') AND j.state = 'running'
			  AND j.attempted_at < now() - $1 * interval '1 microsecond'
		LIMIT 500`, stuckAfter)
	if err != nil {
		return 0, fmt.Errorf("find stranded runs: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return 0, fmt.Errorf("find stranded runs: %w", err)
	}
	rescued := 0
	for _, id := range ids {
		err := s.inTx(ctx, func(tx pgx.Tx) error {
			var kind, resource string
			if err := tx.QueryRow(ctx, `SELECT kind, resource FROM converge_runs WHERE id = $1`, id).Scan(&kind, &resource); err != nil {
				return fmt.Errorf("find run: %w", err)
			}
			var leaseLost bool
			err := tx.QueryRow(ctx, `SELECT coalesce(lease_run_id IS DISTINCT FROM $3 OR lease_expires_at < now(), true)
				FROM converge_streams WHERE kind = $1 AND resource = $2 FOR UPDATE`, kind, resource, id).Scan(&leaseLost)
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
			opts := &river.InsertOpts{Queue: kind, MaxAttempts: riverMaxAttempts}
			switch status {
			case converge.RunRunning:
				if !leaseLost {
					return nil
				}
				if err := s.leaseRelease(ctx, tx, kind, resource, id); err != nil {
					return err
				}
				status, nextAttempt = converge.RunRetrying, nil
			case converge.RunQueued, converge.RunRetrying:
				var stuck bool
				err := tx.QueryRow(ctx, `SELECT state = 'running' AND attempted_at < now() - $2 * interval '1 microsecond'
					FROM river_job WHERE id = $1`, oldJob, stuckAfter).Scan(&stuck)
				if errors.Is(err, pgx.ErrNoRows) || err == nil && !stuck {
					return nil
				}
				if err != nil {
					return fmt.Errorf("look at job %v: %w", oldJob, err)
				}
				// Keep the backoff the lost worker had scheduled.
				if nextAttempt != nil {
					opts.ScheduledAt = *nextAttempt
				}
			default:
				return nil
			}
			job, err := s.river.InsertTx(ctx, tx, RunArgs{RunID: id}, opts)
			if err != nil {
				return fmt.Errorf("enqueue rescue: %w", err)
			}
			if _, err := tx.Exec(ctx, `UPDATE converge_runs SET job_id = $2, status = $3, next_attempt_at = coalesce($4, now()) WHERE id = $1`,
				id, job.Job.ID, status, nextAttempt); err != nil {
				return fmt.Errorf("point run at rescue job: %w", err)
			}
			if oldJob != nil {
				if err := s.jobCancel(ctx, tx, *oldJob); err != nil {
					return err
				}
			}
			rescued++
			return nil
		})
		if err != nil {
			return rescued, fmt.Errorf("rescue run %s: %w", id, err)
		}
	}
	_, err = s.pool.Exec(ctx, `UPDATE converge_attempts a SET outcome = 'abandoned', finished_at = now(),
			duration_ms = (extract(epoch FROM now() - a.started_at) * 1000)::bigint, error = $1
		FROM converge_runs r JOIN converge_streams s ON s.kind = r.kind AND s.resource = r.resource
		WHERE a.run_id = r.id AND a.outcome IS NULL AND r.status IN ('succeeded', 'failed', 'superseded', 'cancelled')
		  AND (s.lease_run_id IS DISTINCT FROM r.id OR s.lease_expires_at < now())`, abandonedError)
	if err != nil {
		return rescued, fmt.Errorf("record abandoned attempts: %w", err)
	}
	return rescued, nil
}
