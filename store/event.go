package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/riverqueue/river"

	"github.com/converge-run/converge"
)

// EventAcceptParams is an event to accept with the run policy of its kind.
type EventAcceptParams struct {
	converge.EventSubmission
	MaxAttempts int
	// Debounce holds back the first attempt of the event's run until this
	// long after its acceptance when the stream's previous version was
	// accepted less than this long before (a burst): a newer version
	// arriving meanwhile supersedes it without a call.
	Debounce time.Duration
}

// EventAccept records an event, its first run and the run's job in one
// transaction, after ending every unfinished run of the stream as
// superseded. A replay of an accepted event with an equal payload returns
// the original with Replay set and changes nothing. A version at or below the
// stream's latest otherwise fails with ESTALEVERSION or EVERSIONCONFLICT.
//
// Concurrent calls are group-committed: they are accepted together, in one
// transaction (see acceptBatch), with the same outcome as one by one.
func (s *Store) EventAccept(ctx context.Context, p EventAcceptParams) (*converge.EventAcceptResult, error) {
	if s.river == nil {
		return nil, errors.New("store has no river client")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return s.accepts.do(p)
}

// eventAcceptOne is EventAccept in a transaction of its own.
func (s *Store) eventAcceptOne(ctx context.Context, p EventAcceptParams) (*converge.EventAcceptResult, error) {
	var res *converge.EventAcceptResult
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		// The upsert locks the stream row for the rest of the transaction:
		// acceptance is serialized per stream. The latest version is raised
		// in the same round trip when the event's is above it.
		var b pgx.Batch
		b.Queue(`INSERT INTO converge_streams AS s (kind, resource, latest_version) VALUES ($1, $2, 0)
			ON CONFLICT (kind, resource) DO UPDATE SET latest_version = s.latest_version
			RETURNING latest_version, `+sinceLatestSQL, p.Kind, p.Resource)
		b.Queue(`UPDATE converge_streams SET latest_version = $3, latest_at = clock_timestamp()
			WHERE kind = $1 AND resource = $2 AND latest_version < $3`,
			p.Kind, p.Resource, p.Version)
		br := tx.SendBatch(ctx, &b)
		var latest, sinceMS int64
		err := br.QueryRow().Scan(&latest, &sinceMS)
		if err != nil {
			_ = br.Close()
			return fmt.Errorf("lock stream: %w", err)
		}
		tag, err := br.Exec()
		if cerr := br.Close(); err == nil && cerr != nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("raise latest version: %w", err)
		}
		if tag.RowsAffected() == 0 { // p.Version <= latest
			res, err = s.acceptOld(ctx, tx, p, latest)
			return err
		}
		ev := &converge.Event{ID: newID()}
		runID := newID()
		b = pgx.Batch{}
		b.Queue(supersedeSQL, p.Kind, p.Resource)
		// received_at is read from the clock now, while the stream row is
		// locked (now() would be the transaction's start, before the lock):
		// it then orders acceptance against attempts of the stream as the
		// lock does, which is what the invariant checker relies on.
		b.Queue(`INSERT INTO converge_events (id, kind, resource, version, payload, received_at)
			VALUES ($1, $2, $3, $4, $5, clock_timestamp()) RETURNING kind, resource, version, payload, received_at`,
			ev.ID, p.Kind, p.Resource, p.Version, []byte(p.Payload))
		br = tx.SendBatch(ctx, &b)
		superseded, jobs, err := supersededRuns(br)
		if err != nil {
			_ = br.Close()
			return err
		}
		ev.Status = converge.RunQueued
		err = br.QueryRow().Scan(&ev.Kind, &ev.Resource, &ev.Version, &ev.Payload, &ev.ReceivedAt)
		if cerr := br.Close(); err == nil && cerr != nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("insert event: %w", payloadError(err))
		}
		for _, j := range jobs {
			if err := s.jobCancel(ctx, tx, j); err != nil {
				return err
			}
		}
		ev.ReceivedAt = ev.ReceivedAt.UTC()
		run, err := s.runInsertID(ctx, tx, ev, runID, 1, p.MaxAttempts, p.debounceAfter(sinceMS))
		if err != nil {
			return err
		}
		res = &converge.EventAcceptResult{Event: ev, Run: run, SupersededRuns: superseded}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("accept event %s/%s@%d: %w", p.Kind, p.Resource, p.Version, err)
	}
	return res, nil
}

// sinceLatestSQL is, in the row of converge_streams being inserted or
// updated, how many milliseconds ago its latest version was accepted (a
// large number when never).
const sinceLatestSQL = `coalesce(extract(epoch FROM clock_timestamp() - s.latest_at) * 1000, 1e12)::bigint`

// debounceAfter is how long the event's first attempt is held back when
// the stream's previous version was accepted sinceMS milliseconds before:
// p.Debounce when that is within it (a burst), zero otherwise.
func (p EventAcceptParams) debounceAfter(sinceMS int64) time.Duration {
	if p.Debounce > 0 && time.Duration(sinceMS)*time.Millisecond < p.Debounce {
		return p.Debounce
	}
	return 0
}

// acceptOld answers an event whose version is not above the stream's latest.
func (s *Store) acceptOld(ctx context.Context, tx pgx.Tx, p EventAcceptParams, latest int64) (*converge.EventAcceptResult, error) {
	var id uuid.UUID
	var equal bool
	err := tx.QueryRow(ctx, `SELECT id, payload = $4::jsonb FROM converge_events
		WHERE kind = $1 AND resource = $2 AND version = $3`, p.Kind, p.Resource, p.Version, []byte(p.Payload)).Scan(&id, &equal)
	switch {
	case err == nil && equal:
		ev, err := s.eventGet(ctx, tx, id, false)
		if err != nil {
			return nil, err
		}
		run, err := scanRun(tx.QueryRow(ctx, `SELECT `+runColumns+` FROM converge_runs r WHERE r.event_id = $1 ORDER BY number DESC LIMIT 1`, id))
		if err != nil {
			return nil, fmt.Errorf("get latest run: %w", err)
		}
		return &converge.EventAcceptResult{Event: ev, Run: run, SupersededRuns: []uuid.UUID{}, Replay: true}, nil
	case err == nil && p.Version == latest:
		return nil, converge.Errorf(converge.EVERSIONCONFLICT,
			"version %d of %s %s was accepted with a different payload", p.Version, p.Kind, p.Resource)
	case err == nil || errors.Is(err, pgx.ErrNoRows):
		e := converge.Errorf(converge.ESTALEVERSION,
			"version %d of %s %s is not above the latest accepted version %d", p.Version, p.Kind, p.Resource, latest)
		e.LatestVersion = &latest
		return nil, e
	default:
		return nil, fmt.Errorf("look up event: %w", payloadError(err))
	}
}

// payloadError translates PostgreSQL refusing an event's payload as jsonb
// (a lone UTF-16 surrogate escape, a number beyond numeric's range) into a
// validation error of the payload field, so that such input is a 422 and
// not an internal error (G9). The payload is the only value of the
// statements it wraps that can raise a data exception (SQLSTATE class 22).
func payloadError(err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || !strings.HasPrefix(pgErr.Code, "22") {
		return err
	}
	msg := "is not storable JSON: " + pgErr.Message
	if pgErr.Detail != "" {
		msg += " (" + pgErr.Detail + ")"
	}
	return &converge.AppError{Code: converge.EINVALID, Message: "payload: " + msg,
		Fields: []converge.FieldError{{Field: "payload", Message: msg}}}
}

// supersedeSQL ends every unfinished run of stream ($1, $2) as superseded.
// The caller holds the stream's row lock and cancels the jobs returned.
const supersedeSQL = `UPDATE converge_runs SET status = 'superseded', finished_at = now(), next_attempt_at = NULL
	WHERE kind = $1 AND resource = $2 AND status IN ('queued', 'running', 'retrying')
	RETURNING id, job_id`

// supersededRuns reads the answer of supersedeSQL, the next result of br:
// the runs superseded and their jobs.
func supersededRuns(br pgx.BatchResults) ([]uuid.UUID, []int64, error) {
	rows, err := br.Query()
	if err != nil {
		return nil, nil, fmt.Errorf("supersede runs: %w", err)
	}
	ids := []uuid.UUID{}
	var jobs []int64
	for rows.Next() {
		var id uuid.UUID
		var job *int64
		if err := rows.Scan(&id, &job); err != nil {
			rows.Close()
			return nil, nil, fmt.Errorf("supersede runs: %w", err)
		}
		ids = append(ids, id)
		if job != nil {
			jobs = append(jobs, *job)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("supersede runs: %w", err)
	}
	return ids, jobs, nil
}

// runInsert adds run number n of ev, with its job, in tx.
func (s *Store) runInsert(ctx context.Context, tx pgx.Tx, ev *converge.Event, n, maxAttempts int) (*converge.Run, error) {
	return s.runInsertID(ctx, tx, ev, newID(), n, maxAttempts, 0)
}

// runJobOpts are the River options of a run's job in queue kind: scheduled
// debounce from now when above zero (jobs.PromoteScheduled makes it
// available on time; River's own scheduler only every 5s).
func runJobOpts(kind string, debounce time.Duration) *river.InsertOpts {
	opts := &river.InsertOpts{Queue: kind, MaxAttempts: riverMaxAttempts}
	if debounce > 0 {
		opts.ScheduledAt = time.Now().Add(debounce)
	}
	return opts
}

// runInsertID is runInsert with the run's id chosen by the caller, and its
// first attempt held back until debounce from now (when above zero).
func (s *Store) runInsertID(ctx context.Context, tx pgx.Tx, ev *converge.Event, runID uuid.UUID, n, maxAttempts int, debounce time.Duration) (*converge.Run, error) {
	job, err := s.river.InsertTx(ctx, tx, RunArgs{RunID: runID}, runJobOpts(ev.Kind, debounce))
	if err != nil {
		return nil, fmt.Errorf("enqueue run: %w", err)
	}
	run, err := scanRun(tx.QueryRow(ctx, `INSERT INTO converge_runs AS r (id, event_id, number, kind, resource, version, status, max_attempts, job_id, next_attempt_at)
		VALUES ($1, $2, $3, $4, $5, $6, 'queued', $7, $8, CASE WHEN $9::bigint > 0 THEN clock_timestamp() + $9 * interval '1 microsecond' END)
		RETURNING `+runColumns,
		runID, ev.ID, n, ev.Kind, ev.Resource, ev.Version, maxAttempts, job.Job.ID, debounce.Microseconds()))
	if err != nil {
		return nil, fmt.Errorf("insert run: %w", err)
	}
	return run, nil
}

// eventColumns is the column list scanEvent reads, in order. An event's
// status is its latest run's.
const eventColumns = `e.id, e.kind, e.resource, e.version, e.payload,
	coalesce((SELECT lr.status FROM converge_runs lr WHERE lr.event_id = e.id ORDER BY lr.number DESC LIMIT 1), 'queued'),
	e.received_at`

func scanEvent(row pgx.Row) (*converge.Event, error) {
	var e converge.Event
	if err := row.Scan(&e.ID, &e.Kind, &e.Resource, &e.Version, &e.Payload, &e.Status, &e.ReceivedAt); err != nil {
		return nil, err
	}
	e.ReceivedAt = e.ReceivedAt.UTC()
	return &e, nil
}

// EventGet returns one event with its runs (oldest first), each with its
// attempt history.
func (s *Store) EventGet(ctx context.Context, id uuid.UUID) (*converge.Event, error) {
	return s.eventGet(ctx, s.pool, id, true)
}

func (s *Store) eventGet(ctx context.Context, q querier, id uuid.UUID, withRuns bool) (*converge.Event, error) {
	ev, err := scanEvent(q.QueryRow(ctx, `SELECT `+eventColumns+` FROM converge_events e WHERE e.id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, converge.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get event %s: %w", id, err)
	}
	if !withRuns {
		return ev, nil
	}
	rows, err := q.Query(ctx, `SELECT `+runColumns+` FROM converge_runs r WHERE r.event_id = $1 ORDER BY r.number`, id)
	if err != nil {
		return nil, fmt.Errorf("list runs: %w", err)
	}
	runs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*converge.Run, error) { return scanRun(row) })
	if err != nil {
		return nil, fmt.Errorf("list runs: %w", err)
	}
	if err := s.attachAttempts(ctx, q, runs); err != nil {
		return nil, err
	}
	ev.Runs = runs
	return ev, nil
}

// EventList returns events newest first and the cursor of the next page
// (nil on the last page).
func (s *Store) EventList(ctx context.Context, p converge.EventListParams) ([]*converge.Event, *uuid.UUID, error) {
	sql := `SELECT ` + eventColumns + ` FROM converge_events e
		WHERE ($1 = '' OR e.kind = $1) AND ($2 = '' OR e.resource = $2)
		  AND ($3 = '' OR (SELECT lr.status FROM converge_runs lr WHERE lr.event_id = e.id ORDER BY lr.number DESC LIMIT 1) = $3)
		  AND ($4::uuid IS NULL OR e.id < $4)
		ORDER BY e.id DESC LIMIT $5`
	if unsettledStatus(p.Status) {
		// Few runs are in this status: walk them (converge_runs_unsettled_event)
		// and keep those that are their event's latest run. The status is
		// one of a fixed set, written into the query so that the planner
		// can use the partial index.
		sql = `SELECT ` + eventColumns + ` FROM converge_runs r JOIN converge_events e ON e.id = r.event_id
		WHERE r.status = '` + string(p.Status) + `' AND $3 <> ''
		  AND NOT EXISTS (SELECT 1 FROM converge_runs n WHERE n.event_id = r.event_id AND n.number > r.number)
		  AND ($1 = '' OR r.kind = $1) AND ($2 = '' OR r.resource = $2)
		  AND ($4::uuid IS NULL OR r.event_id < $4)
		ORDER BY r.event_id DESC LIMIT $5`
	}
	rows, err := s.pool.Query(ctx, sql, p.Kind, p.Resource, string(p.Status), p.Cursor, p.Limit+1)
	if err != nil {
		return nil, nil, fmt.Errorf("list events: %w", err)
	}
	items, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*converge.Event, error) { return scanEvent(row) })
	if err != nil {
		return nil, nil, fmt.Errorf("list events: %w", err)
	}
	var next *uuid.UUID
	if len(items) > p.Limit {
		items = items[:p.Limit]
		id := items[len(items)-1].ID
		next = &id
	}
	return items, next, nil
}

// unsettledStatus reports whether st is a run status that the partial index
// converge_runs_unsettled_event covers.
func unsettledStatus(st converge.RunStatus) bool {
	switch st {
	case converge.RunQueued, converge.RunRunning, converge.RunRetrying, converge.RunFailed, converge.RunCancelled:
		return true
	}
	return false
}
