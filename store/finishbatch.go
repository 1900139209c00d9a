package store

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/converge-run/converge"
)

// AttemptFinishLater records the outcome p as AttemptFinish does, in the
// background, and then calls then with the result. The worker uses it for
// a call that succeeded, so that its River slot is free for the next job
// while the outcome is group-committed, as River completes jobs in the
// background. The stream's lease stays held until the outcome is recorded,
// so nothing else of the stream starts meanwhile; if the process dies
// first, the attempt is rescued like one whose worker died during the call.
// Drain waits for these.
func (s *Store) AttemptFinishLater(p AttemptFinishParams, then func(*AttemptFinishResult, error)) {
	s.later.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), batchTimeout)
		defer cancel()
		then(s.AttemptFinish(ctx, p))
	})
}

// Drain waits until every AttemptFinishLater call has been recorded (or
// has failed), or ctx ends.
func (s *Store) Drain(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		s.later.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("outcomes still being recorded: %w", ctx.Err())
	}
}

// finishBatch finishes attempts of distinct streams in one transaction: the
// streams, runs and attempts are locked and read in one round trip (streams
// first, in one order), and the writes go out in a second, successes as
// set-based statements and every other outcome as it would alone. If the
// batch fails as a whole, each attempt is finished again on its own.
func (s *Store) finishBatch(reqs []AttemptFinishParams) ([]*AttemptFinishResult, []error) {
	return batchRun(s, reqs, func(ctx context.Context, tx pgx.Tx, _ time.Time, res []*AttemptFinishResult, _ []error) error {
		return s.finishBatchTx(ctx, tx, reqs, res)
	}, s.attemptFinishOne)
}

func (s *Store) finishBatchTx(ctx context.Context, tx pgx.Tx, reqs []AttemptFinishParams, res []*AttemptFinishResult) error {
	order := streamOrder(len(reqs), func(i int) (string, string) { return reqs[i].Run.Kind, reqs[i].Run.Resource })
	n := len(order)
	kinds, resources := make([]string, n), make([]string, n)
	runIDs, attempts := make([]uuid.UUID, n), make([]int64, n)
	for j, i := range order {
		r := reqs[i].Run
		kinds[j], resources[j], runIDs[j], attempts[j] = r.Kind, r.Resource, r.ID, int64(reqs[i].Attempt)
	}
	var b pgx.Batch
	b.Queue(`SELECT u.i, coalesce(s.lease_run_id = u.run AND s.lease_attempt = u.a, false)
		FROM unnest($1::text[], $2::text[], $3::uuid[], $4::bigint[]) WITH ORDINALITY u(k, r, run, a, i)
		JOIN converge_streams s ON s.kind = u.k AND s.resource = u.r
		ORDER BY u.i FOR UPDATE OF s`, kinds, resources, uuids(runIDs), attempts)
	b.Queue(`SELECT id, status, attempts FROM converge_runs WHERE id = ANY($1) ORDER BY id FOR UPDATE`, uuids(runIDs))
	b.Queue(`SELECT a.run_id FROM converge_attempts a JOIN unnest($1::uuid[], $2::bigint[]) u(run, n)
		ON a.run_id = u.run AND a.number = u.n WHERE a.outcome IS NULL`, uuids(runIDs), attempts)
	br := tx.SendBatch(ctx, &b)
	states := make([]finishState, n)
	found := make([]bool, n)
	err := scanEach(br, func(row pgx.Rows) error {
		var i int64
		var ours bool
		if err := row.Scan(&i, &ours); err != nil {
			return err
		}
		states[i-1].ours, found[i-1] = ours, true
		return nil
	})
	byRun := make(map[uuid.UUID]int, n)
	for j, id := range runIDs {
		byRun[id] = j
	}
	if err == nil {
		err = scanEach(br, func(row pgx.Rows) error {
			var id uuid.UUID
			var st converge.RunStatus
			var a int
			if err := row.Scan(&id, &st, &a); err != nil {
				return err
			}
			states[byRun[id]].status, states[byRun[id]].attempts = st, a
			return nil
		})
	}
	if err == nil {
		err = scanEach(br, func(row pgx.Rows) error {
			var id uuid.UUID
			if err := row.Scan(&id); err != nil {
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

	// The writes: successes set-based, everything else statement by
	// statement, all in one round trip.
	var ok []int // indexes into order of plain successes
	var writes []stmt
	var extras []func(context.Context, pgx.Tx) error
	for j, i := range order {
		plan := s.planFinish(reqs[i], states[j])
		res[i] = plan.res
		switch {
		case plan.success:
			ok = append(ok, j)
		default:
			writes = append(writes, plan.writes...)
			if plan.extra != nil {
				extras = append(extras, plan.extra)
			}
		}
	}
	if len(ok) > 0 {
		writes = append(writes, successWrites(reqs, order, states, ok)...)
	}
	if err := execAll(ctx, tx, writes...); err != nil {
		return err
	}
	for _, x := range extras {
		if err := x(ctx, tx); err != nil {
			return err
		}
	}
	return nil
}

// successWrites records the successes reqs[order[j]] for j in ok, each
// statement for all of them at once: the same changes as planFinish's
// success path, and one write of each stream row for both its applied
// version and its lease.
func successWrites(reqs []AttemptFinishParams, order []int, states []finishState, ok []int) []stmt {
	n := len(ok)
	runIDs, numbers := make([]uuid.UUID, n), make([]int64, n)
	outputs := make([]*string, n)
	kinds, resources, versions := make([]string, n), make([]string, n), make([]int64, n)
	ours := make([]bool, n)
	for x, j := range ok {
		p := reqs[order[j]]
		runIDs[x], numbers[x] = p.Run.ID, int64(p.Attempt)
		if len(p.Output) > 0 {
			o := string(p.Output)
			outputs[x] = &o
		}
		kinds[x], resources[x], versions[x] = p.Run.Kind, p.Run.Resource, p.Run.Version
		ours[x] = states[j].ours
	}
	return []stmt{
		{"record attempt outcomes", `UPDATE converge_attempts a SET outcome = 'succeeded', finished_at = now(),
				duration_ms = (extract(epoch FROM now() - a.started_at) * 1000)::bigint, error = NULL
			FROM unnest($1::uuid[], $2::bigint[]) u(run, n) WHERE a.run_id = u.run AND a.number = u.n`,
			[]any{uuids(runIDs), numbers}},
		{"mark runs succeeded", `UPDATE converge_runs r SET status = 'succeeded', finished_at = now(), output = u.o::jsonb, error = NULL
			FROM unnest($1::uuid[], $2::text[]) u(id, o) WHERE r.id = u.id`,
			[]any{uuids(runIDs), outputs}},
		{"raise applied versions and release leases", `UPDATE converge_streams s SET
				applied_version = greatest(s.applied_version, u.v),
				applied_at = CASE WHEN coalesce(s.applied_version, 0) < u.v THEN now() ELSE s.applied_at END,
				lease_run_id = CASE WHEN u.ours AND s.lease_run_id = u.run THEN NULL ELSE s.lease_run_id END,
				lease_attempt = CASE WHEN u.ours AND s.lease_run_id = u.run THEN NULL ELSE s.lease_attempt END,
				lease_expires_at = CASE WHEN u.ours AND s.lease_run_id = u.run THEN NULL ELSE s.lease_expires_at END
			FROM unnest($1::text[], $2::text[], $3::bigint[], $4::uuid[], $5::bool[]) u(k, r, v, run, ours)
			WHERE s.kind = u.k AND s.resource = u.r
			  AND (coalesce(s.applied_version, 0) < u.v OR u.ours AND s.lease_run_id = u.run)`,
			[]any{kinds, resources, versions, uuids(runIDs), ours}},
		{"supersede dead letters", `UPDATE converge_dead_letters d SET status = 'superseded', superseded_by_version = u.v,
				resolved_at = now(), resolved_by = 'converge'
			FROM unnest($1::text[], $2::text[], $3::bigint[]) u(k, r, v)
			WHERE d.kind = u.k AND d.resource = u.r AND d.status = 'open' AND d.version < u.v`,
			[]any{kinds, resources, versions}},
	}
}

// streamOrder returns 0..n-1 ordered by the stream of each (kind, resource
// as Go orders strings): the order in which batches lock streams.
func streamOrder(n int, stream func(int) (string, string)) []int {
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		ka, ra := stream(a)
		kb, rb := stream(b)
		if ka != kb {
			if ka < kb {
				return -1
			}
			return 1
		}
		if ra != rb {
			if ra < rb {
				return -1
			}
			return 1
		}
		return 0
	})
	return order
}
