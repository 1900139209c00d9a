package jobs

import (
	"testing"
	"time"

	"github.com/converge-run/converge"
)

// TestRiverJobRetention: River keeps its finished job rows for its usual
// periods, never longer than retention.runs.
func TestRiverJobRetention(t *testing.T) {
	t.Parallel()
	day := 24 * time.Hour
	cases := []struct {
		runs                            time.Duration
		completed, cancelled, discarded time.Duration
	}{
		{0, time.Hour, time.Hour, 7 * day},
		{30 * day, time.Hour, time.Hour, 7 * day},
		{2 * day, time.Hour, time.Hour, 2 * day},
		{time.Minute, time.Minute, time.Minute, time.Minute},
	}
	for _, c := range cases {
		co, ca, di := riverJobRetention(converge.Retention{Runs: c.runs})
		if co != c.completed || ca != c.cancelled || di != c.discarded {
			t.Errorf("runs %s: River keeps completed %s, cancelled %s, discarded %s; want %s, %s, %s", c.runs, co, ca, di, c.completed, c.cancelled, c.discarded)
		}
	}
}
