package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/converge-run/converge"
)

// Group commit settings: how many batches may be in flight at once, how
// many requests one holds, and how long one may take.
const (
	batchesInFlight = 1
	maxBatch        = 128
	batchTimeout    = 30 * time.Second
)

// streamKey identifies a stream in maps.
type streamKey struct{ kind, resource string }

// acceptBatch accepts events of distinct streams in one transaction, with
// set-based statements: the streams are locked in one statement, in one
// order (so that concurrent batches cannot deadlock), and the events, their
// runs and their jobs are written a statement (a River call for the jobs)
// each. Events whose version is not above their stream's latest are
// answered as in eventAcceptOne, in the same transaction. If the batch
// fails as a whole (a payload PostgreSQL refuses, a deadlock), each event is
// accepted again on its own, so that one bad request cannot fail others and
// its error is the one it would have had alone.
func (s *Store) acceptBatch(reqs []EventAcceptParams) ([]*converge.EventAcceptResult, []error) {
	return batchRun(s, reqs, func(ctx context.Context, tx pgx.Tx, _ time.Time, res []*converge.EventAcceptResult, errs []error) error {
		return s.acceptBatchTx(ctx, tx, reqs, res, errs)
	}, s.eventAcceptOne)
}

func (s *Store) acceptBatchTx(ctx context.Context, tx pgx.Tx, reqs []EventAcceptParams, res []*converge.EventAcceptResult, errs []error) error {
	order := streamOrder(len(reqs), func(i int) (string, string) { return reqs[i].Kind, reqs[i].Resource })
	kinds := make([]string, len(order))
	resources := make([]string, len(order))
	versions := make([]int64, len(order))
	for j, i := range order {
		kinds[j], resources[j], versions[j] = reqs[i].Kind, reqs[i].Resource, reqs[i].Version
	}
	var b pgx.Batch
	b.Queue(`INSERT INTO converge_streams AS s (kind, resource, latest_version)
		SELECT k, r, 0 FROM unnest($1::text[], $2::text[]) WITH ORDINALITY u(k, r, i) ORDER BY i
		ON CONFLICT (kind, resource) DO UPDATE SET latest_version = s.latest_version
		RETURNING kind, resource, latest_version, `+sinceLatestSQL, kinds, resources)
	// Raise the latest versions and supersede the raised streams'
	// unfinished runs (the streams are locked by now, so the runs' locks
	// come after them, as everywhere).
	b.Queue(`WITH raised AS (
			UPDATE converge_streams s SET latest_version = u.v, latest_at = clock_timestamp()
			FROM unnest($1::text[], $2::text[], $3::bigint[]) u(k, r, v)
			WHERE s.kind = u.k AND s.resource = u.r AND s.latest_version < u.v
			RETURNING s.kind, s.resource),
		superseded AS (
			UPDATE converge_runs r SET status = 'superseded', finished_at = now(), next_attempt_at = NULL
			FROM raised WHERE r.kind = raised.kind AND r.resource = raised.resource
			  AND r.status IN ('queued', 'running', 'retrying')
			RETURNING r.kind, r.resource, r.id, r.job_id)
		SELECT kind, resource, NULL::uuid, NULL::bigint FROM raised
		UNION ALL SELECT kind, resource, id, job_id FROM superseded`, kinds, resources, versions)
	br := tx.SendBatch(ctx, &b)
	latest := make(map[streamKey]int64, len(reqs))
	since := make(map[streamKey]int64, len(reqs))
	raised := make(map[streamKey]bool, len(reqs))
	var sup supersession
	err := scanEach(br, func(row pgx.Rows) error {
		var k streamKey
		var v, ms int64
		if err := row.Scan(&k.kind, &k.resource, &v, &ms); err != nil {
			return err
		}
		latest[k], since[k] = v, ms
		return nil
	})
	if err == nil {
		err = scanEach(br, func(row pgx.Rows) error {
			var k streamKey
			var run *uuid.UUID
			var job *int64
			if err := row.Scan(&k.kind, &k.resource, &run, &job); err != nil {
				return err
			}
			if run == nil {
				raised[k] = true
				return nil
			}
			sup.add(k, *run, job)
			return nil
		})
	}
	if cerr := br.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("lock streams: %w", err)
	}
	for _, j := range sup.jobs {
		if err := s.jobCancel(ctx, tx, j); err != nil {
			return err
		}
	}

	// The new versions, in lock order.
	var fresh []int
	for _, i := range order {
		if raised[streamKey{reqs[i].Kind, reqs[i].Resource}] {
			fresh = append(fresh, i)
		}
	}
	if len(fresh) > 0 {
		if err := s.acceptFresh(ctx, tx, reqs, fresh, since, &sup, res); err != nil {
			return err
		}
	}
	for _, i := range order {
		p := reqs[i]
		k := streamKey{p.Kind, p.Resource}
		if raised[k] {
			continue
		}
		res[i], errs[i] = s.acceptOld(ctx, tx, p, latest[k])
		// A stale version or a conflict is this request's answer; any other
		// error, a payload PostgreSQL refused included, came from a failed
		// statement and ends the transaction (the requests are then
		// accepted alone, this one with that error).
		var appErr *converge.AppError
		if errs[i] != nil && (!errors.As(errs[i], &appErr) || appErr.Code == converge.EINVALID) {
			return errs[i]
		}
	}
	return nil
}

// supersession is what raising streams' latest versions superseded.
type supersession struct {
	runs map[streamKey][]uuid.UUID
	jobs []int64
}

func (s *supersession) add(k streamKey, run uuid.UUID, job *int64) {
	if s.runs == nil {
		s.runs = make(map[streamKey][]uuid.UUID)
	}
	s.runs[k] = append(s.runs[k], run)
	if job != nil {
		s.jobs = append(s.jobs, *job)
	}
}

// acceptFresh writes the events reqs[fresh] (versions above their streams'
// latest, whose streams are locked and whose unfinished runs sup
// superseded), their runs and jobs. since is how long ago each stream's
// previous version was accepted, in milliseconds.
func (s *Store) acceptFresh(ctx context.Context, tx pgx.Tx, reqs []EventAcceptParams, fresh []int, since map[streamKey]int64, sup *supersession, res []*converge.EventAcceptResult) error {
	n := len(fresh)
	eventIDs, runIDs := make([]uuid.UUID, n), make([]uuid.UUID, n)
	kinds, resources := make([]string, n), make([]string, n)
	versions, maxAttempts := make([]int64, n), make([]int64, n)
	payloads := make([]string, n)
	debounces := make([]int64, n)
	jobs := make([]river.InsertManyParams, n)
	for j, i := range fresh {
		p := reqs[i]
		debounces[j] = p.debounceAfter(since[streamKey{p.Kind, p.Resource}]).Microseconds()
		eventIDs[j], runIDs[j] = newID(), newID()
		kinds[j], resources[j], versions[j], maxAttempts[j] = p.Kind, p.Resource, p.Version, int64(p.MaxAttempts)
		payloads[j] = string(p.Payload)
		jobs[j] = river.InsertManyParams{Args: RunArgs{RunID: runIDs[j]}, InsertOpts: runJobOpts(p.Kind, time.Duration(debounces[j])*time.Microsecond)}
	}
	inserted, err := s.river.InsertManyTx(ctx, tx, jobs)
	if err != nil {
		return fmt.Errorf("enqueue runs: %w", err)
	}
	jobIDs := make([]int64, n)
	for j, r := range inserted {
		jobIDs[j] = r.Job.ID
	}

	var b pgx.Batch
	// received_at is read from the clock while the streams are locked, as
	// in eventAcceptOne.
	b.Queue(`INSERT INTO converge_events (id, kind, resource, version, payload, received_at)
		SELECT id, k, r, v, p::jsonb, clock_timestamp()
		FROM unnest($1::uuid[], $2::text[], $3::text[], $4::bigint[], $5::text[]) u(id, k, r, v, p)
		RETURNING id, payload, received_at`, uuids(eventIDs), kinds, resources, versions, payloads)
	b.Queue(`INSERT INTO converge_runs AS r (id, event_id, number, kind, resource, version, status, max_attempts, job_id, next_attempt_at)
		SELECT id, e, 1, k, rs, v, 'queued', m, j, CASE WHEN d > 0 THEN clock_timestamp() + d * interval '1 microsecond' END
		FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::text[], $5::bigint[], $6::bigint[], $7::bigint[], $8::bigint[]) u(id, e, k, rs, v, m, j, d)
		RETURNING `+runColumns, uuids(runIDs), uuids(eventIDs), kinds, resources, versions, maxAttempts, jobIDs, debounces)
	br := tx.SendBatch(ctx, &b)
	defer func() { _ = br.Close() }()

	events := make(map[uuid.UUID]*converge.Event, n)
	err = scanEach(br, func(row pgx.Rows) error {
		ev := &converge.Event{Status: converge.RunQueued}
		if err := row.Scan(&ev.ID, &ev.Payload, &ev.ReceivedAt); err != nil {
			return err
		}
		ev.ReceivedAt = ev.ReceivedAt.UTC()
		events[ev.ID] = ev
		return nil
	})
	if err != nil {
		return fmt.Errorf("insert events: %w", payloadError(err))
	}
	runs := make(map[uuid.UUID]*converge.Run, n)
	err = scanEach(br, func(row pgx.Rows) error {
		r, err := scanRun(row)
		if err != nil {
			return err
		}
		runs[r.ID] = r
		return nil
	})
	if err != nil {
		return fmt.Errorf("insert runs: %w", err)
	}
	if err := br.Close(); err != nil {
		return fmt.Errorf("accept events: %w", err)
	}
	for j, i := range fresh {
		p := reqs[i]
		ev, run := events[eventIDs[j]], runs[runIDs[j]]
		if ev == nil || run == nil {
			return fmt.Errorf("accept events: event %s or run %s not written", eventIDs[j], runIDs[j])
		}
		ev.Kind, ev.Resource, ev.Version = p.Kind, p.Resource, p.Version
		ids := sup.runs[streamKey{p.Kind, p.Resource}]
		if ids == nil {
			ids = []uuid.UUID{}
		}
		res[i] = &converge.EventAcceptResult{Event: ev, Run: run, SupersededRuns: ids}
	}
	return nil
}

// scanEach reads the next result of br row by row.
func scanEach(br pgx.BatchResults, fn func(pgx.Rows) error) error {
	rows, err := br.Query()
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := fn(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}
