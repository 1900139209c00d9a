package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/converge-run/converge"
)

// Beginning an attempt: load (lock the run's stream, then the run, and read
// the lease, the run and its open attempt) → plan (done, wait, or call;
// pure: planBegin) → write (the plan's statements; for a call the run marked
// running, the attempt row and the lease). AttemptBegin is the path of one
// call, AttemptBeginMany of several in one transaction.

// AttemptBeginParams is a call of AttemptBegin.
type AttemptBeginParams struct {
	RunID    uuid.UUID
	JobID    int64
	LeaseTTL time.Duration
}

// beginState is what beginning an attempt reads under the stream's and the
// run's locks.
type beginState struct {
	kind, resource string
	latest         int64 // the stream's latest accepted version
	held           bool  // the stream's lease is taken and unexpired
	remainingMS    int64 // how long it still is
	holderEnded    bool  // held by a run that has ended: its attempt is being taken back
	run            *converge.Run
	runJob         *int64
	payload        []byte
	open           bool  // an attempt of the run has no outcome: its worker vanished
	debounceMS     int64 // how long the run's first attempt is still held back
}

// beginStreamCols are the columns of a stream (aliased s) that beginState
// reads: kind, resource, latest, held, remainingMS, holderEnded (looked up
// only while the lease is held).
const beginStreamCols = `s.kind, s.resource, s.latest_version,
	coalesce(s.lease_expires_at > now(), false),
	coalesce(greatest(extract(epoch FROM s.lease_expires_at - now()) * 1000, 0), 0)::bigint,
	CASE WHEN s.lease_expires_at > now()
	     THEN coalesce((SELECT h.finished_at IS NOT NULL FROM converge_runs h WHERE h.id = s.lease_run_id), false)
	     ELSE false END`

// openAttemptSQL tells whether run r has an attempt without an outcome
// (its worker vanished). Only the run's latest attempt can be open: an
// attempt begins only after the one before it was closed, in the same
// transaction, and one taken back is deleted with the count lowered. So it
// is looked up by its whole key, one index probe whatever the plan.
const openAttemptSQL = `EXISTS (SELECT 1 FROM converge_attempts a WHERE a.run_id = r.id AND a.number = r.attempts AND a.outcome IS NULL)`

// debounceSQL is how long the first attempt of run r is still held back
// (EventAcceptParams.Debounce), in milliseconds.
const debounceSQL = `CASE WHEN r.attempts = 0 THEN coalesce(greatest(extract(epoch FROM r.next_attempt_at - now()) * 1000, 0), 0) ELSE 0 END::bigint`

// lockBeginRunsSQL locks the runs (aliased r) that where selects, after
// their streams, and reads what beginState needs of them (scanBeginRun).
// Attempts of a run change only under its stream's lock (or once it is
// terminal), so the open attempt read is current.
func lockBeginRunsSQL(where string) string {
	return `SELECT ` + runColumns + `, r.job_id, e.payload, ` + openAttemptSQL + `, ` + debounceSQL + `
		FROM converge_runs r JOIN converge_events e ON e.id = r.event_id WHERE ` + where + ` FOR UPDATE OF r`
}

func scanBeginRun(row pgx.Row, st *beginState) error {
	return beginRunScanner(st)(row)
}

// beginRunScanner reads a row of lockBeginRunsSQL into st; it serves all
// the rows of a result, one at a time.
func beginRunScanner(st *beginState) func(pgx.Row) error {
	runs := newRunScanner(&st.runJob, &st.payload, &st.open, &st.debounceMS)
	return func(row pgx.Row) error {
		var err error
		st.run, err = runs.scan(row)
		return err
	}
}

// abandonedError is the error recorded for an attempt whose worker vanished.
var abandonedError = converge.Error{Class: converge.ClassTransient, Message: "the worker stopped during the attempt (process died or lost its lease)"}

// abandonSQL records as abandoned an attempt of run $1 left open by a
// worker that vanished.
var abandonSQL = `UPDATE converge_attempts SET outcome = 'abandoned', finished_at = now(),
		duration_ms = ` + durationSQL("") + `, error = $2
	WHERE run_id = $1 AND outcome IS NULL`

// runRunningSet marks a run (aliased r) running with attempt count %s.
const runRunningSet = `status = 'running', attempts = %s, started_at = coalesce(r.started_at, now()), next_attempt_at = NULL`

// leaseTakeSet gives a stream's lease to attempt (%[1]s, %[2]s) for %[3]s
// microseconds, and ends the stream's burst (raiseLatestSet): the next
// version's debounce counts from its own acceptance.
const leaseTakeSet = `lease_run_id = %[1]s, lease_attempt = %[2]s, lease_expires_at = now() + %[3]s * interval '1 microsecond',
	burst_since = NULL`

// attemptInsertSQL records attempts (id, n) of rows, begun now. started_at
// is read from the clock under the stream lock, like an event's
// received_at: attempts and acceptances of a stream are then ordered by
// time as they are by the lock.
func attemptInsertSQL(rows string) string {
	return `INSERT INTO converge_attempts (run_id, number, started_at) SELECT id, n, clock_timestamp() FROM ` + rows
}

// beginPlan is what beginning an attempt does, decided from the state: the
// ticket and its writes. A call (DecisionCall) also has the run, attempt and
// lease writes, which the caller makes (one row or set-based).
type beginPlan struct {
	ticket *converge.AttemptTicket
	writes []stmt
	// failed is set when the writes end the run failed (its last attempt
	// was abandoned).
	failed bool
}

// How long a run waits for its stream's lease before it tries again: at
// most maxLeaseWait, or endedLeaseWait when the lease's run has ended and
// its attempt is being taken back.
const (
	maxLeaseWait   = 2 * time.Second
	endedLeaseWait = 100 * time.Millisecond
)

// planBegin decides what beginning an attempt does for job jobID, given st.
func planBegin(st *beginState, jobID int64) beginPlan {
	t := &converge.AttemptTicket{Decision: converge.DecisionDone}
	plan := beginPlan{ticket: t}
	run := st.run
	if run.Status.Terminal() || st.runJob == nil || *st.runJob != jobID {
		return plan
	}
	if run.Version < st.latest {
		// Unreachable while acceptance supersedes in its own transaction;
		// kept so that an older version can never reach the target.
		plan.writes = append(plan.writes, stmt{"supersede run", supersedeRunSQL, []any{run.ID}})
		return plan
	}
	if st.held {
		// The holder's finish wakes this job, unless it comes before the
		// job's snooze is recorded (the job is still running then, and
		// River leaves a running job alone): the wait bounds how late it
		// may then start. A holder whose run has ended (superseded,
		// cancelled) is having its call cancelled and lets go within
		// moments, so its wait is short.
		t.Decision = converge.DecisionWait
		limit := maxLeaseWait
		if st.holderEnded {
			limit = endedLeaseWait
		}
		t.Wait = min(max(time.Duration(st.remainingMS)*time.Millisecond, 10*time.Millisecond), limit)
		return plan
	}
	if st.debounceMS > 0 {
		t.Decision = converge.DecisionWait
		t.Wait = time.Duration(st.debounceMS) * time.Millisecond
		return plan
	}
	if st.open && run.Attempts >= run.MaxAttempts {
		plan.writes = append(plan.writes,
			stmt{"record abandoned attempt", abandonSQL, []any{run.ID, abandonedError}},
			stmt{"fail run", `UPDATE converge_runs SET status = 'failed', finished_at = now(), next_attempt_at = NULL, error = $2
				WHERE id = $1`, []any{run.ID, abandonedError}},
			leaseReleaseStmt(st.kind, st.resource, run.ID))
		plan.failed = true
		return plan
	}
	if st.open {
		plan.writes = append(plan.writes, stmt{"record abandoned attempt", abandonSQL, []any{run.ID, abandonedError}})
	}
	t.Decision, t.Payload, t.Attempt = converge.DecisionCall, st.payload, run.Attempts+1
	return plan
}

// AttemptBegin starts the next attempt of a run if, and only if, the run is
// unfinished, driven by jobID, belongs to its stream's latest accepted
// version, and the stream's lease is free. It takes the lease for leaseTTL,
// records an attempt left open by a vanished worker as abandoned, and ends
// the run as failed when that abandoned attempt was its last.
func (s *Store) AttemptBegin(ctx context.Context, runID uuid.UUID, jobID int64, leaseTTL time.Duration) (*converge.AttemptTicket, error) {
	var t *converge.AttemptTicket
	var from time.Time
	var wfs []workflowStatus
	err := s.inTxFrom(ctx, &from, func(tx pgx.Tx) error {
		t, wfs = &converge.AttemptTicket{Decision: converge.DecisionDone}, nil
		// Load. Both locks go out in one round trip; the run's lock is
		// taken, and its snapshot read, after the stream's.
		var b pgx.Batch
		b.Queue(`SELECT `+beginStreamCols+` FROM converge_streams s
			WHERE (s.kind, s.resource) = (SELECT kind, resource FROM converge_runs WHERE id = $1)
			FOR UPDATE OF s`, runID)
		b.Queue(lockBeginRunsSQL(`r.id = $1`), runID)
		br := tx.SendBatch(ctx, &b)
		var st beginState
		err := br.QueryRow().Scan(&st.kind, &st.resource, &st.latest, &st.held, &st.remainingMS, &st.holderEnded)
		if errors.Is(err, pgx.ErrNoRows) {
			// No such run.
			return br.Close()
		}
		if err != nil {
			_ = br.Close()
			return fmt.Errorf("lock stream: %w", err)
		}
		err = scanBeginRun(br.QueryRow(), &st)
		if cerr := br.Close(); err == nil && cerr != nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("lock run: %w", err)
		}

		plan := planBegin(&st, jobID)
		t = plan.ticket
		if t.Decision != converge.DecisionCall {
			if err := execAll(ctx, tx, plan.writes...); err != nil || !plan.failed {
				return err
			}
			if st.run.WorkflowRunID != nil { // a failed step fails its workflow run
				if wfs, err = s.workflowStatusesTx(ctx, tx); err != nil {
					return err
				}
			}
			return s.notifyRunsFailed(ctx, tx, []uuid.UUID{runID})
		}
		// Write: the attempt's writes go out in one round trip.
		b = pgx.Batch{}
		queue(&b, plan.writes)
		b.Queue(`UPDATE converge_runs r SET `+fmt.Sprintf(runRunningSet, "$2")+`
			WHERE id = $1 RETURNING `+runColumns, runID, t.Attempt)
		b.Queue(attemptInsertSQL(`(VALUES ($1::uuid, $2::int)) u(id, n)`), runID, t.Attempt)
		b.Queue(`UPDATE converge_streams SET `+fmt.Sprintf(leaseTakeSet, "$3", "$4", "$5")+` WHERE kind = $1 AND resource = $2`,
			st.kind, st.resource, runID, t.Attempt, leaseTTL.Microseconds())
		br = tx.SendBatch(ctx, &b)
		defer func() { _ = br.Close() }()
		if err := execResults(br, plan.writes); err != nil {
			return err
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
		return nil, fmt.Errorf("begin attempt of run %s: %w", runID, err)
	}
	s.reportWorkflowStatuses(wfs)
	t.LeaseFrom = from
	return t, nil
}

// AttemptBeginMany begins attempts of several runs in one transaction: the
// runs' streams are locked in one statement, in the lock order, then the
// runs, and the attempts that go ahead are written set-based. A run whose
// stream is already in the batch (two jobs of one stream: rare) is left
// out: its ticket is nil, and the caller begins it with AttemptBegin
// afterwards. An error means the transaction failed as a whole; the caller
// then begins each run with AttemptBegin.
func (s *Store) AttemptBeginMany(ctx context.Context, reqs []AttemptBeginParams) ([]*converge.AttemptTicket, error) {
	res := make([]*converge.AttemptTicket, len(reqs))
	var from time.Time
	var wfs []workflowStatus
	if err := s.inTxFrom(ctx, &from, func(tx pgx.Tx) error { wfs = nil; return s.attemptBeginMany(ctx, tx, reqs, res, &wfs) }); err != nil {
		return nil, fmt.Errorf("begin %d attempts: %w", len(reqs), err)
	}
	s.reportWorkflowStatuses(wfs)
	for _, t := range res {
		if t != nil {
			t.LeaseFrom = from
		}
	}
	return res, nil
}

func (s *Store) attemptBeginMany(ctx context.Context, tx pgx.Tx, reqs []AttemptBeginParams, res []*converge.AttemptTicket, wfs *[]workflowStatus) error {
	// Load.
	runIDs := make([]uuid.UUID, len(reqs))
	byRun := make(map[uuid.UUID]int, len(reqs))
	for i, r := range reqs {
		runIDs[i] = r.RunID
		byRun[r.RunID] = i
	}
	runIDArg := uuids(runIDs)
	var b pgx.Batch
	queue(&b, []stmt{indexPlansOn})
	b.Queue(`SELECT r.id, `+beginStreamCols+`
		FROM converge_runs r JOIN converge_streams s ON s.kind = r.kind AND s.resource = r.resource
		WHERE r.id = ANY($1)
		ORDER BY `+streamLockOrder+`, r.id FOR UPDATE OF s`, runIDArg)
	b.Queue(lockBeginRunsSQL(`r.id = ANY($1) ORDER BY r.id`), runIDArg)
	br := tx.SendBatch(ctx, &b)
	states := make([]*beginState, len(reqs))
	var order []int // requests in lock order
	err := execResults(br, []stmt{indexPlansOn})
	if err == nil {
		err = scanEach(br, func(row pgx.Rows) error {
			var id uuid.UUID
			st := &beginState{}
			if err := row.Scan(uuidDest(&id), &st.kind, &st.resource, &st.latest, &st.held, &st.remainingMS, &st.holderEnded); err != nil {
				return err
			}
			i := byRun[id]
			states[i] = st
			order = append(order, i)
			return nil
		})
	}
	if err == nil {
		var st beginState
		scan := beginRunScanner(&st)
		err = scanEach(br, func(row pgx.Rows) error {
			if err := scan(row); err != nil {
				return err
			}
			if to := states[byRun[st.run.ID]]; to != nil {
				to.run, to.runJob, to.payload, to.open, to.debounceMS = st.run, st.runJob, st.payload, st.open, st.debounceMS
			}
			return nil
		})
	}
	if cerr := br.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("lock streams and runs: %w", err)
	}
	for i, st := range states {
		if st == nil {
			res[i] = &converge.AttemptTicket{Decision: converge.DecisionDone} // no such run
		}
	}

	// Plan.
	var writes []stmt
	var calls []int
	var failed []uuid.UUID // runs whose last attempt was abandoned
	failedStep := false    // one of them is a workflow step (its workflow run fails)
	endFailed := func() error {
		if failedStep {
			var err error
			if *wfs, err = s.workflowStatusesTx(ctx, tx); err != nil {
				return err
			}
		}
		return s.notifyRunsFailed(ctx, tx, failed)
	}
	seen := make(map[streamKey]bool, len(order))
	for _, i := range order {
		st := states[i]
		k := streamKey{st.kind, st.resource}
		if seen[k] {
			continue // begun on its own, after this batch
		}
		seen[k] = true
		plan := planBegin(st, reqs[i].JobID)
		res[i] = plan.ticket
		writes = append(writes, plan.writes...)
		if plan.failed {
			failed = append(failed, reqs[i].RunID)
			failedStep = failedStep || st.run.WorkflowRunID != nil
		}
		if plan.ticket.Decision == converge.DecisionCall {
			calls = append(calls, i)
		}
	}
	if len(calls) == 0 {
		if err := execAll(ctx, tx, append(writes, indexPlansOff)...); err != nil {
			return err
		}
		return endFailed()
	}

	// Write, set-based.
	n := len(calls)
	ids, numbers := make([][16]byte, n), make([]int64, n) // run ids, as uuids encodes them
	kinds, resources, ttls := make([]string, n), make([]string, n), make([]int64, n)
	for x, i := range calls {
		ids[x], numbers[x] = reqs[i].RunID, int64(res[i].Attempt)
		kinds[x], resources[x], ttls[x] = states[i].kind, states[i].resource, reqs[i].LeaseTTL.Microseconds()
	}
	b = pgx.Batch{}
	queue(&b, writes)
	b.Queue(`UPDATE converge_runs r SET `+fmt.Sprintf(runRunningSet, "u.n")+`
		FROM unnest($1::uuid[], $2::bigint[]) u(id, n) WHERE r.id = u.id
		RETURNING `+runColumns, ids, numbers)
	b.Queue(attemptInsertSQL(`unnest($1::uuid[], $2::bigint[]) u(id, n)`), ids, numbers)
	b.Queue(`UPDATE converge_streams s SET `+fmt.Sprintf(leaseTakeSet, "u.id", "u.n", "u.ttl")+`
		FROM unnest($1::text[], $2::text[], $3::uuid[], $4::bigint[], $5::bigint[]) u(k, r, id, n, ttl)
		WHERE s.kind = u.k AND s.resource = u.r`, kinds, resources, ids, numbers, ttls)
	queue(&b, []stmt{indexPlansOff})
	br = tx.SendBatch(ctx, &b)
	defer func() { _ = br.Close() }()
	if err := execResults(br, writes); err != nil {
		return err
	}
	runScan := newRunScanner()
	err = scanEach(br, func(row pgx.Rows) error {
		run, err := runScan.scan(row)
		if err != nil {
			return err
		}
		res[byRun[run.ID]].Run = run
		return nil
	})
	if err != nil {
		return fmt.Errorf("mark runs running: %w", err)
	}
	if _, err := br.Exec(); err != nil {
		return fmt.Errorf("record attempts: %w", err)
	}
	if _, err := br.Exec(); err != nil {
		return fmt.Errorf("take leases: %w", err)
	}
	if err := execResults(br, []stmt{indexPlansOff}); err != nil {
		return err
	}
	if err := br.Close(); err != nil {
		return fmt.Errorf("begin attempts: %w", err)
	}
	for _, i := range calls {
		if res[i].Run == nil {
			return fmt.Errorf("begin attempts: run %s not marked running", reqs[i].RunID)
		}
	}
	return endFailed()
}
