package faults

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/converge-run/converge/test/invariant"
)

// TestSupersedeWithoutNotifications: with the workers' River polling
// instead of listening (no LISTEN/NOTIFY reaches them, as behind a pooler
// or when notifications are lost with their connection) and a lease whose
// heartbeat comes only every 5s (rescue_after 30s), a running slow attempt
// of a run that a newer version supersedes has its request context
// cancelled within 1s, as the target sees it (SPEC §15; issue 20 item 6).
func TestSupersedeWithoutNotifications(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and converge processes; skipped with -short")
	}
	pg := startPG(t)
	tgt := invariant.NewTarget(invariant.TargetConfig{Respond: func(ctx context.Context, c invariant.Call) int {
		if c.Version == 1 {
			// Slow: held until converge lets go.
			select {
			case <-ctx.Done():
			case <-time.After(30 * time.Second):
			}
		}
		return http.StatusOK
	}})
	st := newStack(t, pg, tgt, stackConfig{RescueAfter: 30 * time.Second, PollOnly: true})
	st.mustStart("api", "api")
	st.mustStart("worker", "w1")
	ctx := t.Context()
	const trials = 5
	worst := time.Duration(0)
	for i := range trials {
		resource := fmt.Sprintf("supersede/%d", i)
		if _, err := st.submitUntilAccepted(ctx, "build", resource, 1, map[string]any{}); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for !inFlight(tgt, resource) {
			if time.Now().After(deadline) {
				t.Fatalf("%s@1 never reached the target", resource)
			}
			time.Sleep(20 * time.Millisecond)
		}
		// Let the call run a little, past any start-up notification.
		time.Sleep(300 * time.Millisecond)
		superseded := time.Now()
		if a, err := st.submitUntilAccepted(ctx, "build", resource, 2, map[string]any{}); err != nil || a.status != http.StatusAccepted {
			t.Fatalf("submit %s@2: %v %v", resource, err, a)
		}
		var end time.Time
		for end.IsZero() {
			for _, c := range tgt.Calls() {
				if c.Resource == resource && c.Version == 1 {
					end = c.End
				}
			}
			if time.Since(superseded) > 20*time.Second {
				t.Fatalf("%s@1 still running 20s after it was superseded", resource)
			}
			time.Sleep(10 * time.Millisecond)
		}
		took := end.Sub(superseded)
		worst = max(worst, took)
		t.Logf("%s@1: call cancelled %s after the supersession was sent", resource, took.Round(time.Millisecond))
		if took > time.Second {
			t.Errorf("%s@1: the superseded call ran %s after the newer version was submitted, want at most 1s", resource, took)
		}
	}
	t.Logf("worst of %d: %s", trials, worst.Round(time.Millisecond))
}

// inFlight reports whether a call of resource is in flight at tgt.
func inFlight(tgt *invariant.Target, resource string) bool {
	for _, c := range tgt.InFlight() {
		if c.Resource == resource {
			return true
		}
	}
	return false
}
