package store

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// beginBatch begins attempts of several runs in one transaction: the runs'
// streams are locked in one statement, in the order every batch uses, then
// the runs, and the attempts that go ahead are written set-based. A run
// whose stream is already in the batch (two jobs of one stream: rare) is
// begun on its own afterwards. If the batch fails as a whole, each is begun
// again on its own.
func (s *Store) beginBatch(reqs []beginRequest) ([]*AttemptTicket, []error) {
	return batchRun(s, reqs, func(ctx context.Context, tx pgx.Tx, from time.Time, res []*AttemptTicket, _ []error) error {
		if err := s.beginBatchTx(ctx, tx, reqs, res); err != nil {
			return err
		}
		for _, t := range res {
			if t != nil {
				t.LeaseFrom = from
			}
		}
		return nil
	}, s.attemptBeginOne)
}

// beginBatchTx fills res for the requests it begins; those it leaves nil
// are to be begun on their own.
func (s *Store) beginBatchTx(ctx context.Context, tx pgx.Tx, reqs []beginRequest, res []*AttemptTicket) error {
	runIDs := make([]uuid.UUID, len(reqs))
	byRun := make(map[uuid.UUID]int, len(reqs))
	for i, r := range reqs {
		runIDs[i] = r.runID
		byRun[r.runID] = i
	}
	var b pgx.Batch
	// Streams in byte order of (kind, resource), as Go orders strings: the
	// lock order of every batch.
	b.Queue(`SELECT r.id, s.kind, s.resource, s.latest_version,
			coalesce(s.lease_expires_at > now(), false),
			coalesce(greatest(extract(epoch FROM s.lease_expires_at - now()) * 1000, 0), 0)::bigint
		FROM converge_runs r JOIN converge_streams s ON s.kind = r.kind AND s.resource = r.resource
		WHERE r.id = ANY($1)
		ORDER BY s.kind COLLATE "C", s.resource COLLATE "C", r.id FOR UPDATE OF s`, uuids(runIDs))
	b.Queue(`SELECT `+runColumns+`, r.job_id, e.payload,
			`+openAttemptSQL+`, `+debounceSQL+`
		FROM converge_runs r JOIN converge_events e ON e.id = r.event_id WHERE r.id = ANY($1) ORDER BY r.id FOR UPDATE OF r`, uuids(runIDs))
	br := tx.SendBatch(ctx, &b)
	states := make([]*beginState, len(reqs))
	var order []int // requests in lock order
	err := scanEach(br, func(row pgx.Rows) error {
		var id uuid.UUID
		st := &beginState{}
		if err := row.Scan(&id, &st.kind, &st.resource, &st.latest, &st.held, &st.remainingMS); err != nil {
			return err
		}
		i := byRun[id]
		states[i] = st
		order = append(order, i)
		return nil
	})
	if err == nil {
		err = scanEach(br, func(row pgx.Rows) error {
			var runJob *int64
			var payload []byte
			var open bool
			var debounceMS int64
			run, err := scanRunWith(row, &runJob, &payload, &open, &debounceMS)
			if err != nil {
				return err
			}
			if st := states[byRun[run.ID]]; st != nil {
				st.run, st.runJob, st.payload, st.open, st.debounceMS = run, runJob, payload, open, debounceMS
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
			res[i] = &AttemptTicket{Decision: DecisionDone} // no such run
		}
	}

	var writes []stmt
	type call struct {
		i              int
		kind, resource string
	}
	var calls []call
	seen := make(map[streamKey]bool, len(order))
	for _, i := range order {
		st := states[i]
		k := streamKey{st.kind, st.resource}
		if seen[k] {
			continue // begun on its own, after this batch
		}
		seen[k] = true
		plan := planBegin(st, reqs[i].jobID)
		res[i] = plan.ticket
		writes = append(writes, plan.writes...)
		if plan.ticket.Decision == DecisionCall {
			calls = append(calls, call{i, st.kind, st.resource})
		}
	}
	if len(calls) == 0 {
		return execAll(ctx, tx, writes...)
	}

	n := len(calls)
	ids, numbers := make([]uuid.UUID, n), make([]int64, n)
	kinds, resources, ttls := make([]string, n), make([]string, n), make([]int64, n)
	for x, c := range calls {
		ids[x], numbers[x] = reqs[c.i].runID, int64(res[c.i].Attempt)
		kinds[x], resources[x], ttls[x] = c.kind, c.resource, reqs[c.i].leaseTTL.Microseconds()
	}
	b = pgx.Batch{}
	for _, w := range writes {
		b.Queue(w.sql, w.args...)
	}
	b.Queue(`UPDATE converge_runs r SET status = 'running', attempts = u.n,
			started_at = coalesce(r.started_at, now()), next_attempt_at = NULL
		FROM unnest($1::uuid[], $2::bigint[]) u(id, n) WHERE r.id = u.id
		RETURNING `+runColumns, uuids(ids), numbers)
	// started_at from the clock under the streams' locks, as in
	// attemptBeginOne.
	b.Queue(`INSERT INTO converge_attempts (run_id, number, started_at)
		SELECT id, n, clock_timestamp() FROM unnest($1::uuid[], $2::bigint[]) u(id, n)`, uuids(ids), numbers)
	b.Queue(`UPDATE converge_streams s SET lease_run_id = u.id, lease_attempt = u.n,
			lease_expires_at = now() + u.ttl * interval '1 microsecond'
		FROM unnest($1::text[], $2::text[], $3::uuid[], $4::bigint[], $5::bigint[]) u(k, r, id, n, ttl)
		WHERE s.kind = u.k AND s.resource = u.r`, kinds, resources, uuids(ids), numbers, ttls)
	br = tx.SendBatch(ctx, &b)
	defer func() { _ = br.Close() }()
	for _, w := range writes {
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("%s: %w", w.what, err)
		}
	}
	err = scanEach(br, func(row pgx.Rows) error {
		run, err := scanRun(row)
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
	if err := br.Close(); err != nil {
		return fmt.Errorf("begin attempts: %w", err)
	}
	for _, c := range calls {
		if res[c.i].Run == nil {
			return fmt.Errorf("begin attempts: run %s not marked running", reqs[c.i].runID)
		}
	}
	return nil
}
