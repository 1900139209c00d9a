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
	ctx, cancel := context.WithTimeout(context.Background(), batchTimeout)
	defer cancel()
	res := make([]*converge.EventAcceptResult, len(reqs))
	errs := make([]error, len(reqs))
	if len(reqs) > 1 {
		err := s.inTx(ctx, func(tx pgx.Tx) error { return s.acceptBatchTx(ctx, tx, reqs, res, errs) })
		if err == nil {
			return res, errs
		}
		clear(res)
		clear(errs)
	}
	eachAlone(len(reqs), func(int) bool { return false }, func(i int) {
		res[i], errs[i] = s.eventAcceptOne(ctx, reqs[i])
	})
	return res, errs
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
		RETURNING kind, resource, latest_version`, kinds, resources)
	b.Queue(`UPDATE converge_streams s SET latest_version = u.v
		FROM unnest($1::text[], $2::text[], $3::bigint[]) u(k, r, v)
		WHERE s.kind = u.k AND s.resource = u.r AND s.latest_version < u.v
		RETURNING s.kind, s.resource`, kinds, resources, versions)
	br := tx.SendBatch(ctx, &b)
	latest := make(map[streamKey]int64, len(reqs))
	raised := make(map[streamKey]bool, len(reqs))
	err := scanEach(br, func(row pgx.Rows) error {
		var k streamKey
		var v int64
		if err := row.Scan(&k.kind, &k.resource, &v); err != nil {
			return err
		}
		latest[k] = v
		return nil
	})
	if err == nil {
		err = scanEach(br, func(row pgx.Rows) error {
			var k streamKey
			if err := row.Scan(&k.kind, &k.resource); err != nil {
				return err
			}
			raised[k] = true
			return nil
		})
	}
	if cerr := br.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("lock streams: %w", err)
	}

	// The new versions, in lock order.
	var fresh []int
	for _, i := range order {
		if raised[streamKey{reqs[i].Kind, reqs[i].Resource}] {
			fresh = append(fresh, i)
		}
	}
	if len(fresh) > 0 {
		if err := s.acceptFresh(ctx, tx, reqs, fresh, res); err != nil {
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
		var appErr *converge.AppError
		if errs[i] != nil && !errors.As(errs[i], &appErr) {
			return errs[i]
		}
	}
	return nil
}

// acceptFresh writes the events reqs[fresh] (versions above their streams'
// latest, whose streams are locked), their runs and jobs, after superseding
// the streams' unfinished runs.
func (s *Store) acceptFresh(ctx context.Context, tx pgx.Tx, reqs []EventAcceptParams, fresh []int, res []*converge.EventAcceptResult) error {
	n := len(fresh)
	eventIDs, runIDs := make([]uuid.UUID, n), make([]uuid.UUID, n)
	kinds, resources := make([]string, n), make([]string, n)
	versions, maxAttempts := make([]int64, n), make([]int64, n)
	payloads := make([]string, n)
	jobs := make([]river.InsertManyParams, n)
	for j, i := range fresh {
		p := reqs[i]
		eventIDs[j], runIDs[j] = newID(), newID()
		kinds[j], resources[j], versions[j], maxAttempts[j] = p.Kind, p.Resource, p.Version, int64(p.MaxAttempts)
		payloads[j] = string(p.Payload)
		jobs[j] = river.InsertManyParams{Args: RunArgs{RunID: runIDs[j]}, InsertOpts: &river.InsertOpts{Queue: p.Kind, MaxAttempts: riverMaxAttempts}}
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
	b.Queue(`UPDATE converge_runs SET status = 'superseded', finished_at = now(), next_attempt_at = NULL
		WHERE (kind, resource) IN (SELECT * FROM unnest($1::text[], $2::text[]))
		  AND status IN ('queued', 'running', 'retrying')
		RETURNING kind, resource, id, job_id`, kinds, resources)
	// received_at is read from the clock while the streams are locked, as
	// in eventAcceptOne.
	b.Queue(`INSERT INTO converge_events (id, kind, resource, version, payload, received_at)
		SELECT id, k, r, v, p::jsonb, clock_timestamp()
		FROM unnest($1::uuid[], $2::text[], $3::text[], $4::bigint[], $5::text[]) u(id, k, r, v, p)
		RETURNING id, payload, received_at`, uuids(eventIDs), kinds, resources, versions, payloads)
	b.Queue(`INSERT INTO converge_runs AS r (id, event_id, number, kind, resource, version, status, max_attempts, job_id)
		SELECT id, e, 1, k, rs, v, 'queued', m, j
		FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::text[], $5::bigint[], $6::bigint[], $7::bigint[]) u(id, e, k, rs, v, m, j)
		RETURNING `+runColumns, runIDs, eventIDs, kinds, resources, versions, maxAttempts, jobIDs)
	br := tx.SendBatch(ctx, &b)
	defer func() { _ = br.Close() }()

	superseded := make(map[streamKey][]uuid.UUID)
	var cancelJobs []int64
	err = scanEach(br, func(row pgx.Rows) error {
		var k streamKey
		var id uuid.UUID
		var job *int64
		if err := row.Scan(&k.kind, &k.resource, &id, &job); err != nil {
			return err
		}
		superseded[k] = append(superseded[k], id)
		if job != nil {
			cancelJobs = append(cancelJobs, *job)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("supersede runs: %w", err)
	}
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
	for _, j := range cancelJobs {
		if err := s.jobCancel(ctx, tx, j); err != nil {
			return err
		}
	}
	for j, i := range fresh {
		p := reqs[i]
		ev, run := events[eventIDs[j]], runs[runIDs[j]]
		if ev == nil || run == nil {
			return fmt.Errorf("accept events: event %s or run %s not written", eventIDs[j], runIDs[j])
		}
		ev.Kind, ev.Resource, ev.Version = p.Kind, p.Resource, p.Version
		sup := superseded[streamKey{p.Kind, p.Resource}]
		if sup == nil {
			sup = []uuid.UUID{}
		}
		res[i] = &converge.EventAcceptResult{Event: ev, Run: run, SupersededRuns: sup}
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
