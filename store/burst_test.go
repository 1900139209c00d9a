package store_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/converge-run/converge/store"
)

// TestDebounceBurstBounded: a new run's first attempt is held back the
// kind's debounce (2s here), but never past its stream's burst start plus
// store.BurstMaxDebounces debounces, so that versions that keep arriving
// less than a debounce apart still reach the target (SPEC §6). A gap of a
// debounce or more starts a new burst, and so does an attempt of the
// stream beginning. The run's next_attempt_at and its River job's
// scheduled_at agree, through the one-call path (EventAccept) and the
// set-based one (EventAcceptMany) alike. A long burst is made by moving
// the stream's burst_since back, as a burst of that length would have
// left it.
func TestDebounceBurstBounded(t *testing.T) {
	t.Parallel()
	const debounce = 2 * time.Second
	bound := store.BurstMaxDebounces * debounce
	for _, many := range []bool{false, true} {
		t.Run(fmt.Sprintf("many=%v", many), func(t *testing.T) {
			t.Parallel()
			d := newDiffPath(t, many)
			d.debounce = debounce
			ctx := t.Context()
			// inBurst makes both streams look like a burst that began ago
			// and whose latest version arrived gap ago.
			inBurst := func(ago, gap time.Duration) {
				t.Helper()
				if _, err := d.pool.Exec(ctx, `UPDATE converge_streams SET burst_since = now() - $1 * interval '1 microsecond',
					latest_at = now() - $2 * interval '1 microsecond'`, ago.Microseconds(), gap.Microseconds()); err != nil {
					t.Fatal(err)
				}
			}
			// heldBack checks that the runs of version v, and their jobs,
			// are held back from now between within[0] (excluded) and
			// within[1].
			heldBack := func(step string, v int64, within [2]time.Duration) {
				t.Helper()
				for _, res := range []string{"a", "b"} {
					var run, job float64
					err := d.pool.QueryRow(ctx, `SELECT coalesce(extract(epoch FROM r.next_attempt_at - clock_timestamp()), 0) * 1000,
							extract(epoch FROM j.scheduled_at - clock_timestamp()) * 1000
						FROM converge_runs r JOIN river_job j ON j.id = r.job_id WHERE r.resource = $1 AND r.version = $2`, res, v).Scan(&run, &job)
					if err != nil {
						t.Fatalf("%s: %s@%d: %v", step, res, v, err)
					}
					for what, ms := range map[string]float64{"run": run, "job": job} {
						got := time.Duration(ms * float64(time.Millisecond))
						if got <= within[0] && within[0] > 0 || got > within[1] {
							t.Errorf("%s: %s@%d: the %s is held back %v, want over %v and at most %v", step, res, v, what, got, within[0], within[1])
						}
					}
				}
			}
			// Each check allows half a debounce (1s) for a loaded machine
			// between the accept and the query.
			full, half := [2]time.Duration{debounce / 2, debounce}, [2]time.Duration{time.Microsecond, debounce / 2}

			d.accept(t, diffAccept{"a", 1, `{}`}, diffAccept{"b", 1, `{}`})
			heldBack("a quiet stream's version", 1, full)

			inBurst(bound-debounce/2, 10*time.Millisecond)
			d.accept(t, diffAccept{"a", 2, `{}`}, diffAccept{"b", 2, `{}`})
			heldBack("half a debounce left of the burst's bound", 2, half)

			inBurst(2*bound, 10*time.Millisecond)
			d.accept(t, diffAccept{"a", 3, `{}`}, diffAccept{"b", 3, `{}`})
			heldBack("a burst past its bound", 3, [2]time.Duration{-time.Hour, 0})

			inBurst(2*bound, debounce+10*time.Millisecond)
			d.accept(t, diffAccept{"a", 4, `{}`}, diffAccept{"b", 4, `{}`})
			heldBack("a version a debounce after the one before (a new burst)", 4, full)

			// An attempt begins (its debounce over): the burst ends with it.
			if _, err := d.pool.Exec(ctx, `UPDATE converge_runs SET next_attempt_at = now() WHERE version = 4`); err != nil {
				t.Fatal(err)
			}
			inBurst(2*bound, 10*time.Millisecond)
			d.begin(t, "a@4", "b@4")
			var open int
			if err := d.pool.QueryRow(ctx, `SELECT count(*) FROM converge_streams WHERE burst_since IS NOT NULL`).Scan(&open); err != nil || open != 0 {
				t.Fatalf("after the begins, %d streams still in a burst (%v), want 0", open, err)
			}
			d.accept(t, diffAccept{"a", 5, `{}`}, diffAccept{"b", 5, `{}`})
			heldBack("the version after an attempt began", 5, full)
		})
	}
}
