package store_test

import (
	"fmt"
	"testing"
)

// TestRunCreatedAfterEventReceived: a run is never created before its
// event was received. An event's received_at is read from the clock under
// the stream's lock, after the transaction began (and, in a group-commit
// batch, after it waited for the lock); its first run's created_at is read
// from the clock as well, after it, through the one-call path and the
// set-based one alike.
func TestRunCreatedAfterEventReceived(t *testing.T) {
	t.Parallel()
	for _, many := range []bool{false, true} {
		t.Run(fmt.Sprintf("many=%v", many), func(t *testing.T) {
			t.Parallel()
			d := newDiffPath(t, many)
			d.accept(t, diffAccept{"a", 1, `{}`}, diffAccept{"b", 1, `{}`})
			d.accept(t, diffAccept{"a", 2, `{}`}, diffAccept{"b", 2, `{}`})
			var runs, before int
			if err := d.pool.QueryRow(t.Context(), `SELECT count(*), count(*) FILTER (WHERE r.created_at < e.received_at)
				FROM converge_runs r JOIN converge_events e ON e.id = r.event_id`).Scan(&runs, &before); err != nil {
				t.Fatal(err)
			}
			if runs != 4 || before != 0 {
				t.Fatalf("%d of %d runs were created before their event was received", before, runs)
			}
		})
	}
}
