package invariant

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/jackc/pgx/v5"
)

// loadRunCounts reads the terminal runs by kind and status that
// converge_run_counts (migration 000014) keeps, its deltas summed, in
// the snapshot's transaction; s.runCounts stays nil on a schema without
// the table.
func loadRunCounts(ctx context.Context, tx pgx.Tx, s *snapshot) error {
	var exists bool
	if err := tx.QueryRow(ctx, `SELECT to_regclass('converge_run_counts') IS NOT NULL`).Scan(&exists); err != nil {
		return fmt.Errorf("read run counts: %w", err)
	}
	if !exists {
		return nil
	}
	rows, err := tx.Query(ctx, `SELECT kind, status, sum(n)::bigint FROM converge_run_counts GROUP BY kind, status`)
	if err != nil {
		return fmt.Errorf("read run counts: %w", err)
	}
	s.runCounts = map[[2]string]int64{}
	var kind, status string
	var n int64
	_, err = pgx.ForEachRow(rows, []any{&kind, &status, &n}, func() error {
		if n != 0 {
			s.runCounts[[2]string{kind, status}] = n
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("read run counts: %w", err)
	}
	return nil
}

// checkRunCounts: the counts converge_runs{kind,status} reads for the
// terminal statuses (converge_run_counts, its deltas summed) equal
// the terminal runs there are, by kind and status, and count no
// unfinished status.
func (c *checker) checkRunCounts() {
	if c.db.runCounts == nil {
		return
	}
	rows := map[[2]string]int64{}
	for _, run := range c.db.runs {
		if terminal(run.status) {
			rows[[2]string{run.kind, run.status}]++
		}
	}
	keys := slices.Collect(maps.Keys(rows))
	for k := range c.db.runCounts {
		if _, ok := rows[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b [2]string) int { return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1])) })
	for _, k := range keys {
		if got, want := c.db.runCounts[k], rows[k]; got != want {
			c.fail("counts", "", "converge_run_counts has %d %s runs of kind %s, the rows %d", got, k[1], k[0], want)
		}
	}
}
