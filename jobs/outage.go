package jobs

import (
	"time"

	"github.com/converge-run/converge/store"
)

// outage is a database outage an outageWatch saw end.
type outage struct {
	// began is when the first pass failed, on this process's clock
	// (with its monotonic reading).
	began time.Time
	// length is from began to the first pass that succeeded again.
	length time.Duration
	// margin is taken off began for the quick pass: one promoter
	// interval (the fetch poll interval, 50 ms by default). The jobs
	// attempted within it before the first failure are left to the
	// periodic pass, since that failure may have been this process's
	// alone (a connection it lost) while other workers were about to
	// record them.
	margin time.Duration
}

// before is the moment before which a job attempted and still running in
// River counts as stuck after o.
func (o outage) before() time.Time { return o.began.Add(-o.margin) }

// outageWatch notices when the database comes back after an outage, from
// the outcome of each pass a loop makes over the store. The Promoter feeds
// it: its loop reads and writes the database every fetch poll interval (at
// most a second) in every worker process, so an outage is seen within
// about one interval of its start and of its end.
//
// The first pass that fails because the database could record nothing
// (store.IsOutage: unreachable, shutting down, starting or recovering,
// read-only, out of resources) marks when the outage began; the first pass
// that succeeds after it ends the outage and calls ended. Other errors (a
// slow database's timeouts, a bug) neither begin nor end one, and the
// caller passes no error of a pass cut short by its own context.
//
// Why: a River job that was running when the database went away can stay
// running in River with no worker on it (its worker's snooze or completion
// was lost, or it was fetched and its attempt could not begin), and the
// reconciler's periodic pass takes it as stuck only four of its intervals
// after its attempted_at, a minute with the default rescue_after. No worker
// could have recorded the end of a job attempted before the outage while
// the database was down, so the reconciler's quick pass (ended is its
// RunOnceAfterOutage, asked for at once) takes those at once.
//
// It is used by one goroutine, the loop's.
type outageWatch struct {
	ended func(outage)
	began time.Time // of the outage in progress; zero while there is none
}

// observe takes the outcome err of a pass that ended at now.
func (w *outageWatch) observe(now time.Time, err error) {
	switch {
	case err == nil:
		if w.began.IsZero() {
			return
		}
		o := outage{began: w.began, length: now.Sub(w.began)}
		w.began = time.Time{}
		if w.ended != nil {
			w.ended(o)
		}
	case w.began.IsZero() && store.IsOutage(err):
		w.began = now
	}
}
