package api

import (
	"testing"
	"time"
)

// TestRateLimiterRealWait checks, on a fake clock, that a refused request
// is told the real time until a slot frees (what is left of the window),
// and that the budget is whole again after it.
func TestRateLimiterRealWait(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_000_000, 0)
	l := newLimiter(2, time.Minute)
	l.now = func() time.Time { return now }
	if d := l.take("a"); !d.allowed || d.remaining != 1 || d.reset != time.Minute {
		t.Fatalf("first = %+v", d)
	}
	now = now.Add(10 * time.Second)
	if d := l.take("a"); !d.allowed || d.remaining != 0 {
		t.Fatalf("second = %+v", d)
	}
	now = now.Add(35*time.Second + 500*time.Millisecond)
	d := l.take("a")
	if d.allowed || d.reset != 14500*time.Millisecond || seconds(d.reset) != "15" {
		t.Fatalf("third = %+v (%ss), want refused with 14.5s (15s) left", d, seconds(d.reset))
	}
	if d := l.take("b"); !d.allowed {
		t.Fatalf("another key = %+v, want allowed", d)
	}
	now = now.Add(d.reset)
	if d := l.take("a"); !d.allowed || d.remaining != 1 {
		t.Fatalf("after the wait = %+v, want allowed with 1 left", d)
	}
	if len(l.buckets) > 2 {
		t.Errorf("%d buckets kept", len(l.buckets))
	}
}
