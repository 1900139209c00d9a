package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// RunCountsCompactBatch is how many rows of converge_run_counts one
// compaction transaction folds at most, so that a transaction's work is
// bounded whatever piled up.
const RunCountsCompactBatch = 10_000

// runCountsCompactMaxBatches bounds a pass: at most that many
// transactions of RunCountsCompactBatch rows.
const runCountsCompactMaxBatches = 50

// runCountsCompactLockSQL takes the transaction-level advisory lock of the
// compaction if no other transaction holds it (transaction-level: a pooler
// in transaction mode may hand the next statement another connection, so
// no session lock is ever taken).
const runCountsCompactLockSQL = `SELECT pg_try_advisory_xact_lock(hashtextextended('converge_run_counts_compact', 0))`

// runCountsCompactSQL folds at most $1 rows of converge_run_counts into
// one per (kind, status) (none for a sum of 0) and returns how many it
// deleted and how many it inserted.
//
// It is exact at every moment, with finishing transactions inserting rows
// meanwhile, under MVCC: the DELETE sees the rows committed before its
// snapshot and no other; a row inserted by a transaction that commits
// later is neither deleted nor summed, and counts after as before. Nothing
// else deletes or updates these rows while it runs (the triggers only
// insert; one compaction at a time, by the advisory lock; the TRUNCATE
// trigger's DELETE waits for the ACCESS SHARE lock on converge_runs that
// RunCountsCompact takes first), so the DELETE removes every row it sees,
// and the sums inserted are exactly those of the rows removed. The INSERT
// runs on the DELETE's snapshot (one statement), so it never sees, nor
// folds again, its own rows. The deletion and the insertion commit
// together: a snapshot sees either the rows or their sums, and a
// compaction killed midway rolls back having changed nothing.
const runCountsCompactSQL = `
WITH d AS (
    DELETE FROM converge_run_counts
     WHERE ctid = ANY (ARRAY(SELECT ctid FROM converge_run_counts LIMIT $1))
    RETURNING kind, status, n),
s AS (
    INSERT INTO converge_run_counts (kind, status, n)
    SELECT kind, status, sum(n) FROM d GROUP BY kind, status HAVING sum(n) <> 0
    RETURNING 1)
SELECT (SELECT count(*) FROM d), (SELECT count(*) FROM s)`

// errRunCountsBusy rolls back a compaction that found converge_runs
// locked.
var errRunCountsBusy = errors.New("converge_runs is locked")

// RunCountsCompact folds the rows of converge_run_counts (migration
// 000014), where each statement that ends runs inserts its deltas, into
// one row per kind and status, RunCountsCompactBatch rows per transaction
// while batches come full (at most runCountsCompactMaxBatches), so that
// the scrape, which sums the rows, reads few. It returns how many rows it
// deleted. Another compaction in progress (another worker process) is not
// an error: this one returns 0 at once; nor is a lock on converge_runs
// that conflicts with ACCESS SHARE (a TRUNCATE, a migration's ALTER TABLE),
// held or waited for: the compaction does not wait behind it, and is made
// again at the next interval.
func (s *Store) RunCountsCompact(ctx context.Context) (int64, error) {
	var total int64
	for range runCountsCompactMaxBatches {
		var deleted, inserted int64
		busy := false
		err := s.inTx(ctx, func(tx pgx.Tx) error {
			var got bool
			if err := tx.QueryRow(ctx, runCountsCompactLockSQL).Scan(&got); err != nil {
				return fmt.Errorf("lock the run counts' compaction: %w", err)
			}
			if !got {
				busy = true
				return nil
			}
			if _, err := tx.Exec(ctx, `LOCK TABLE converge_runs IN ACCESS SHARE MODE NOWAIT`); err != nil {
				var pgErr *pgconn.PgError
				if errors.As(err, &pgErr) && pgErr.Code == "55P03" {
					busy = true
					return errRunCountsBusy
				}
				return fmt.Errorf("lock converge_runs against TRUNCATE: %w", err)
			}
			if err := tx.QueryRow(ctx, runCountsCompactSQL, RunCountsCompactBatch).Scan(&deleted, &inserted); err != nil {
				return fmt.Errorf("compact run counts: %w", err)
			}
			return nil
		})
		if busy {
			return total, nil
		}
		if err != nil {
			return total, err
		}
		total += deleted
		if deleted < RunCountsCompactBatch {
			return total, nil
		}
	}
	return total, nil
}
