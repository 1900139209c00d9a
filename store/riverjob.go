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
	"github.com/riverqueue/river/rivertype"

	"github.com/converge-run/converge"
)

// Everything the store does to River's jobs is in this file: the calls of
// River's *Tx API (so that a job is enqueued, cancelled or woken in the
// same transaction as converge's rows), and the few statements on
// river_job itself, each with why River's API could not do it.

// runJobOpts are the River options of a run's job in queue kind: scheduled
// at at when it is set (jobs.Promoter makes it available on time; River's
// own scheduler only every 5s).
func runJobOpts(kind string, at time.Time) *river.InsertOpts {
	return &river.InsertOpts{Queue: kind, MaxAttempts: converge.RunJobMaxAttempts, ScheduledAt: at}
}

// debounceAt is the moment debounce from now, or the zero time (at once)
// when debounce is not above zero.
func debounceAt(debounce time.Duration) time.Time {
	if debounce > 0 {
		return time.Now().Add(debounce)
	}
	return time.Time{}
}

// jobInsert enqueues the job of run runID in queue kind, held back for
// debounce when it is above zero, and returns its id.
func (s *Store) jobInsert(ctx context.Context, tx pgx.Tx, runID uuid.UUID, kind string, debounce time.Duration) (int64, error) {
	id, err := s.jobInsertAt(ctx, tx, runID, kind, debounceAt(debounce))
	if err != nil {
		return 0, fmt.Errorf("enqueue run: %w", err)
	}
	return id, nil
}

// jobInsertAt enqueues the job of run runID in queue kind, scheduled at at
// (at once when zero).
func (s *Store) jobInsertAt(ctx context.Context, tx pgx.Tx, runID uuid.UUID, kind string, at time.Time) (int64, error) {
	job, err := s.river.InsertTx(ctx, tx, converge.RunArgs{RunID: runID}, runJobOpts(kind, at))
	if err != nil {
		return 0, err
	}
	return job.Job.ID, nil
}

// jobInsertMany enqueues the jobs of runs runIDs[i] in queues kinds[i],
// each held back for debounces[i] when above zero, in one statement, and
// returns their ids in order.
func (s *Store) jobInsertMany(ctx context.Context, tx pgx.Tx, runIDs []uuid.UUID, kinds []string, debounces []time.Duration) ([]int64, error) {
	params := make([]river.InsertManyParams, len(runIDs))
	opts := make([]river.InsertOpts, len(runIDs)) // one allocation for the batch, not one per job
	for i, id := range runIDs {
		opts[i] = *runJobOpts(kinds[i], debounceAt(debounces[i]))
		params[i] = river.InsertManyParams{Args: converge.RunArgs{RunID: id}, InsertOpts: &opts[i]}
	}
	inserted, err := s.river.InsertManyTx(ctx, tx, params)
	if err != nil {
		return nil, fmt.Errorf("enqueue runs: %w", err)
	}
	ids := make([]int64, len(inserted))
	for i, r := range inserted {
		ids[i] = r.Job.ID
	}
	return ids, nil
}

// jobCancel cancels job jobID (a job already gone is not an error).
func (s *Store) jobCancel(ctx context.Context, tx pgx.Tx, jobID int64) error {
	if _, err := s.river.JobCancelTx(ctx, tx, jobID); err != nil && !errors.Is(err, converge.ErrNotFound) && !isRiverNotFound(err) {
		return fmt.Errorf("cancel job %d: %w", jobID, err)
	}
	return nil
}

// jobCancelMany cancels the jobs jobIDs of runs a batch of accepts has
// just superseded, as jobCancel cancels each, waiting for no job's lock
// when there are several.
//
// Why SQL: River's JobCancelTx cancels one job per round trip, waiting for
// its row lock, and a batch of accepts supersedes up to one run per stream
// (in a storm of versions, one per stream of the batch, each with a job
// scheduled for its debounce). One JobCancelTx after another inside the
// batch's transaction cost a round trip each while every stream of the
// batch stayed locked, and deadlocked with River's scheduler (JobSchedule
// locks the due scheduled jobs in its own order, without SKIP LOCKED) and
// its completer: PostgreSQL broke the cycle only after deadlock_timeout
// (1 s), stalling every accept for that second. Here the jobs that are not
// running are cancelled as JobCancelTx cancels them (state cancelled,
// finalized_at, cancel_attempted_at in the metadata) in one statement that
// skips the rows another transaction holds, and the same statement locks
// the running ones it can (SKIP LOCKED too), which then go through
// JobCancelTx, since their producer must be told to stop them; holding
// their locks already, it waits for none. So the batch never waits for a
// job's lock while holding another's. A job skipped because River was
// scheduling, promoting or fetching it at that moment is left as it is:
// its run is superseded, so whichever worker gets it finds the run ended
// (AttemptBegin: DecisionDone) and never calls the target. A running job
// skipped is one River's completer holds: its Work has returned, so there
// is no call to stop (and the run watch stops a superseded call within a
// second anyway, SPEC §15).
func (s *Store) jobCancelMany(ctx context.Context, tx pgx.Tx, jobIDs []int64) error {
	if len(jobIDs) == 0 {
		return nil
	}
	if len(jobIDs) == 1 {
		// One lock to wait for, and no other job locked by this
		// transaction yet: no cycle.
		return s.jobCancel(ctx, tx, jobIDs[0])
	}
	rows, err := tx.Query(ctx, `WITH cancelled AS (
			UPDATE river_job SET state = 'cancelled', finalized_at = now(),
				metadata = jsonb_set(metadata, '{cancel_attempted_at}', to_jsonb(now()), true)
			WHERE id IN (SELECT id FROM river_job
				WHERE id = ANY($1) AND state NOT IN ('running', 'cancelled', 'completed', 'discarded') AND finalized_at IS NULL
				FOR UPDATE SKIP LOCKED)
			RETURNING id)
		SELECT j.id FROM river_job j WHERE j.id = ANY($1) AND j.state = 'running' AND j.id NOT IN (SELECT id FROM cancelled)
		ORDER BY j.id FOR UPDATE SKIP LOCKED`, jobIDs)
	if err != nil {
		return fmt.Errorf("cancel %d jobs: %w", len(jobIDs), err)
	}
	running, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return fmt.Errorf("cancel %d jobs: %w", len(jobIDs), err)
	}
	for _, id := range running {
		if err := s.jobCancel(ctx, tx, id); err != nil {
			return err
		}
	}
	return nil
}

// endedJobsDeleteStmt deletes River jobs jobIDs, in which the attempts
// ran whose finish has just ended their runs in this transaction
// (succeeded or failed; store.finishFollowUps). A run given a new job
// meanwhile (the reconciler) keeps that one: it finds the run ended
// (AttemptBegin: DecisionDone). It is the transaction's last statement
// that locks anything: the finish holds no job's lock while it waits for
// another's (a wake's JobRetryTx, a workflow step's accept cancelling a
// superseded job), and River's completer, which may hold several of these
// jobs in any order, waits at most for the commit. A job another
// transaction holds (River's completer, which got there first) is
// skipped, never waited for: River completes it and its cleaner deletes it
// as before.
//
// Why SQL: River's JobDeleteTx refuses a running job, and the worker's job
// is running until its Work has returned and River's completer has marked
// it completed, after the finish. Nothing converge reads is in the job
// (docs/dead-letters.md, "nothing we need is in River's tables"), so
// keeping it until River's cleaner deletes it (retention.runs later) only
// costs the completion's write: an update of a row with seven indexes,
// two of them GIN, which the delete replaces by one that touches no
// index. River's completer then finds no row and updates nothing, and
// reports nothing for a job it does not find (it reports the rows it
// gets back); the producer's count of running jobs does not depend on the
// row.
func endedJobsDeleteStmt(jobIDs []int64) stmt {
	return stmt{"delete the ended runs' jobs", `DELETE FROM river_job WHERE id IN (
			SELECT id FROM river_job WHERE id = ANY($1) FOR UPDATE SKIP LOCKED)`, []any{jobIDs}}
}

// jobWake makes job jobID available at once (a job already gone is not an
// error).
func (s *Store) jobWake(ctx context.Context, tx pgx.Tx, jobID int64) error {
	if _, err := s.river.JobRetryTx(ctx, tx, jobID); err != nil && !isRiverNotFound(err) {
		return fmt.Errorf("wake job %d: %w", jobID, err)
	}
	return nil
}

func isRiverNotFound(err error) bool {
	return errors.Is(err, river.ErrNotFound)
}

// JobsPromote makes the scheduled jobs of queues whose time has come
// available, as River's scheduler does, and returns how many.
//
// Why SQL: River's scheduler runs every five seconds and its interval is
// not configurable; converge schedules jobs for shorter delays (a debounced
// run's first attempt, retries after a backoff of more than five seconds),
// which would start up to five seconds late otherwise (a notification's
// retry too), and River's API has no call that promotes due jobs. Only
// converge's own job kinds (runs, notifications) are touched,
// and the jobs have no unique options, so the update needs none of River's
// unique-state handling.
func (s *Store) JobsPromote(ctx context.Context, queues []string) (int64, error) {
	tag, err := s.db.Exec(ctx, `UPDATE river_job SET state = 'available'
		WHERE id IN (
			SELECT id FROM river_job
			WHERE state = 'scheduled' AND queue = ANY($1) AND scheduled_at <= now() AND kind = ANY($2)
			ORDER BY scheduled_at LIMIT 1000 FOR UPDATE SKIP LOCKED)
		  AND state = 'scheduled'`, queues, []string{converge.RunArgs{}.Kind(), converge.NotificationArgs{}.Kind()})
	if err != nil {
		return 0, fmt.Errorf("promote scheduled jobs: %w", err)
	}
	return tag.RowsAffected(), nil
}

// RunStrandedListMax is how many runs RunStrandedList returns at most.
const RunStrandedListMax = 500

// RunStrandedList returns up to RunStrandedListMax runs that RunRescue may
// have to rescue:
// running runs whose stream lease expired or went to another run, and
// queued or retrying runs whose job has been running in River for longer
// than stuckAfter (the worker died between fetching the job and beginning
// an attempt, or between finishing an attempt and River recording the
// job's snooze). stuckAfter is an age on the database's clock (now()):
// the reconciler's periodic pass gives four of its intervals, its quick
// pass after a database outage the time since the outage began, plus a
// margin, so that every job attempted before the outage counts (see
// jobs.Reconciler.RunOnceAfterOutage).
//
// Why SQL: the second kind is found by joining converge's runs with their
// jobs' state and attempted_at; River's JobList filters jobs by state and
// kind but cannot join, so it would list every running job of every queue.
func (s *Store) RunStrandedList(ctx context.Context, stuckAfter time.Duration) ([]uuid.UUID, error) {
	rows, err := s.db.Query(ctx, `SELECT r.id FROM converge_runs r
			JOIN converge_streams s ON s.kind = r.kind AND s.resource = r.resource
			WHERE r.finished_at IS NULL AND r.status = 'running' AND (s.lease_run_id IS DISTINCT FROM r.id OR s.lease_expires_at < now())
		UNION ALL
		SELECT r.id FROM converge_runs r JOIN river_job j ON j.id = r.job_id
			WHERE r.finished_at IS NULL AND r.status IN `+waitingSQL+` AND j.state = 'running'
			  AND j.attempted_at < now() - $1 * interval '1 microsecond'
		LIMIT $2`, stuckAfter.Microseconds(), RunStrandedListMax)
	if err != nil {
		return nil, fmt.Errorf("find stranded runs: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return nil, fmt.Errorf("find stranded runs: %w", err)
	}
	return ids, nil
}

// jobStuck reports whether job jobID has been running in River for longer
// than stuckAfter, on the database's clock (false when the job is gone):
// RunStrandedList's test of one job, under the run's lock.
//
// Why SQL: it is read in the transaction that holds the run's lock, so that
// the answer and the rescue agree; River's JobGetTx would do, but reads the
// whole row (args, errors, metadata) for two columns.
func jobStuck(ctx context.Context, tx pgx.Tx, jobID int64, stuckAfter time.Duration) (bool, error) {
	var stuck bool
	err := tx.QueryRow(ctx, `SELECT state = 'running' AND attempted_at < now() - $2 * interval '1 microsecond'
		FROM river_job WHERE id = $1`, jobID, stuckAfter.Microseconds()).Scan(&stuck)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("look at job %d: %w", jobID, err)
	}
	return stuck, nil
}

// notificationJobsInsert enqueues the notification jobs args (args[i]
// tried at most maxAttempts[i] times), each in its receiver's queue, in
// one statement.
func (s *Store) notificationJobsInsert(ctx context.Context, tx pgx.Tx, args []converge.NotificationArgs, maxAttempts []int) error {
	params := make([]river.InsertManyParams, len(args))
	for i, a := range args {
		params[i] = river.InsertManyParams{Args: a, InsertOpts: &river.InsertOpts{Queue: converge.NotificationQueue(a.Receiver), MaxAttempts: maxAttempts[i]}}
	}
	if _, err := s.river.InsertManyTx(ctx, tx, params); err != nil {
		return fmt.Errorf("enqueue notifications: %w", err)
	}
	return nil
}

// NotificationsUnroutedCancel cancels the notification jobs still to be
// tried (available, scheduled, retryable, pending) whose queue is none of
// the routes' (NotifyRoutesSet): their receiver is no longer configured,
// so no worker takes them. It returns their args, for the caller to log
// and count. A job already running is left to finish. River's JobList and
// JobCancel do it; no statement of ours.
func (s *Store) NotificationsUnroutedCancel(ctx context.Context) ([]converge.NotificationArgs, error) {
	routed := make(map[string]bool, len(s.routes))
	for _, r := range s.routes {
		routed[converge.NotificationQueue(r.Key)] = true
	}
	params := river.NewJobListParams().Kinds(converge.NotificationArgs{}.Kind()).
		States(rivertype.JobStateAvailable, rivertype.JobStateScheduled, rivertype.JobStateRetryable, rivertype.JobStatePending).
		First(500)
	var dropped []converge.NotificationArgs
	for {
		res, err := s.river.JobList(ctx, params)
		if err != nil {
			return dropped, fmt.Errorf("list notification jobs: %w", err)
		}
		for _, job := range res.Jobs {
			if routed[job.Queue] {
				continue
			}
			var a converge.NotificationArgs
			// A job of an older version may not decode in full; its id and
			// type are still worth logging.
			_ = json.Unmarshal(job.EncodedArgs, &a)
			if _, err := s.river.JobCancel(ctx, job.ID); err != nil && !isRiverNotFound(err) {
				return dropped, fmt.Errorf("cancel notification job %d: %w", job.ID, err)
			}
			dropped = append(dropped, a)
		}
		if len(res.Jobs) < 500 || res.LastCursor == nil {
			return dropped, nil
		}
		params = params.After(res.LastCursor)
	}
}
