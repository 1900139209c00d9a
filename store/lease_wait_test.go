package store_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/store"
)

// TestLeaseWaitBehindEndedHolder: a run whose stream's lease is held waits
// before it tries again: at most 2s behind a run still going (its finish
// wakes the waiting job, unless that comes before the job's wait is
// recorded), but at most 100ms behind a run that has ended (superseded: its
// attempt's call is being cancelled and lets go within moments), through
// the one-call and the set-based begin alike.
func TestLeaseWaitBehindEndedHolder(t *testing.T) {
	t.Parallel()
	for _, many := range []bool{false, true} {
		t.Run(fmt.Sprintf("many=%v", many), func(t *testing.T) {
			t.Parallel()
			d := newDiffPath(t, many)
			ctx := t.Context()
			job := func(name string) int64 {
				t.Helper()
				var j int64
				if err := d.pool.QueryRow(ctx, `SELECT job_id FROM converge_runs WHERE id = $1`, d.runs[name].ID).Scan(&j); err != nil {
					t.Fatal(err)
				}
				return j
			}
			waits := func(names ...string) []time.Duration {
				t.Helper()
				ps := make([]store.AttemptBeginParams, len(names))
				for i, n := range names {
					ps[i] = store.AttemptBeginParams{RunID: d.runs[n].ID, JobID: job(n), LeaseTTL: time.Minute}
				}
				tks := make([]*converge.AttemptTicket, len(ps))
				if many {
					var err error
					if tks, err = d.st.AttemptBeginMany(ctx, ps); err != nil {
						t.Fatal(err)
					}
				} else {
					for i, p := range ps {
						var err error
						if tks[i], err = d.st.AttemptBegin(ctx, p.RunID, p.JobID, p.LeaseTTL); err != nil {
							t.Fatal(err)
						}
					}
				}
				out := make([]time.Duration, len(tks))
				for i, tk := range tks {
					if tk == nil || tk.Decision != converge.DecisionWait {
						t.Fatalf("begin %s: %+v, want a wait", names[i], tk)
					}
					out[i] = tk.Wait
				}
				return out
			}
			d.accept(t, diffAccept{"a", 1, `{}`}, diffAccept{"b", 1, `{}`})
			d.begin(t, "a@1", "b@1")
			// a@2 supersedes a@1, whose attempt still holds the lease: a
			// holder that has ended. b@1's job begun again while its own
			// attempt holds the lease: a holder still going.
			d.accept(t, diffAccept{"a", 2, `{}`})
			got := waits("a@2", "b@1")
			if got[0] > 100*time.Millisecond || got[0] <= 0 {
				t.Errorf("behind a superseded run's attempt: waits %v, want at most 100ms", got[0])
			}
			if got[1] != 2*time.Second {
				t.Errorf("behind a run still going: waits %v, want 2s", got[1])
			}
		})
	}
}
