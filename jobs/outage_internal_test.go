package jobs

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestOutageWatch: the first pass failing with an outage error marks the
// outage's beginning, later failures keep it, and the first success ends
// it, once; errors that are no outage (a timeout, a bug) neither begin nor
// end one.
func TestOutageWatch(t *testing.T) {
	var got []outage
	w := outageWatch{ended: func(o outage) { got = append(got, o) }}
	t0 := time.Now()
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	down := fmt.Errorf("promote scheduled jobs: %w", &pgconn.PgError{Code: "57P03"})
	refused := fmt.Errorf("promote scheduled jobs: %w", &pgconn.ConnectError{})
	slow := fmt.Errorf("promote scheduled jobs: %w", &pgconn.PgError{Code: "57014"})
	bug := fmt.Errorf("promote scheduled jobs: %w", &pgconn.PgError{Code: "42601"})

	w.observe(at(0), nil)
	w.observe(at(1*time.Second), slow)
	w.observe(at(2*time.Second), bug)
	w.observe(at(3*time.Second), context.DeadlineExceeded)
	w.observe(at(4*time.Second), nil)
	if len(got) != 0 {
		t.Fatalf("errors that are no outage ended outages: %+v", got)
	}
	w.observe(at(5*time.Second), refused)
	w.observe(at(6*time.Second), down)
	w.observe(at(7*time.Second), slow)
	w.observe(at(8*time.Second), nil)
	w.observe(at(9*time.Second), nil)
	if len(got) != 1 || !got[0].began.Equal(at(5*time.Second)) || got[0].length != 3*time.Second {
		t.Fatalf("outages ended: %+v, want one that began at +5s and lasted 3s", got)
	}
	w.observe(at(10*time.Second), errors.Join(errors.New("batch"), down))
	w.observe(at(12*time.Second), nil)
	if len(got) != 2 || !got[1].began.Equal(at(10*time.Second)) || got[1].length != 2*time.Second {
		t.Fatalf("outages ended: %+v, want a second that began at +10s and lasted 2s", got)
	}
	got[1].margin = 50 * time.Millisecond
	if b := got[1].before(); !b.Equal(at(10*time.Second - 50*time.Millisecond)) {
		t.Errorf("before = %s, want the outage's beginning less the margin", b.Sub(t0))
	}
}
