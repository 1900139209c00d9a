package testkit

import (
	"testing"
	"time"
)

// pollInterval is how often Eventually and WaitFor ask their condition.
const pollInterval = 20 * time.Millisecond

// Eventually calls cond every 20ms until it reports true, and fails the
// test with what cond last said when it has not within timeout. cond may
// itself fail the test (t.Fatal) when waiting longer makes no sense.
func Eventually(t testing.TB, timeout time.Duration, cond func() (ok bool, why string)) {
	t.Helper()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	deadline := time.After(timeout)
	for {
		ok, why := cond()
		if ok {
			return
		}
		select {
		case <-deadline:
			t.Fatalf("after %s: %s", timeout, why)
		case <-tick.C:
		}
	}
}

// WaitFor is Eventually for a condition that has nothing to say: on
// timeout the test fails "waiting for what".
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	Eventually(t, timeout, func() (bool, string) { return cond(), "waiting for " + what })
}
