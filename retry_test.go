package converge_test

import (
	"testing"
	"time"

	"github.com/converge-run/converge"
)

// TestBackoffDelay checks SPEC §6: the delay before attempt n+1 is drawn
// from the upper half of min(max, initial·2^(n-1)), and never below a
// Retry-After.
func TestBackoffDelay(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		b          converge.Backoff
		n          int
		retryAfter time.Duration
		ceil       time.Duration
	}{
		{"first retry", converge.Backoff{Initial: time.Second, Max: 10 * time.Minute}, 1, 0, time.Second},
		{"second retry", converge.Backoff{Initial: time.Second, Max: 10 * time.Minute}, 2, 0, 2 * time.Second},
		{"fifth retry", converge.Backoff{Initial: time.Second, Max: 10 * time.Minute}, 5, 0, 16 * time.Second},
		{"capped", converge.Backoff{Initial: time.Second, Max: 10 * time.Minute}, 12, 0, 10 * time.Minute},
		{"capped far out", converge.Backoff{Initial: time.Second, Max: 10 * time.Minute}, 1000, 0, 10 * time.Minute},
		{"milliseconds", converge.Backoff{Initial: 50 * time.Millisecond, Max: time.Second}, 3, 0, 200 * time.Millisecond},
		{"max not a power of two", converge.Backoff{Initial: 100 * time.Millisecond, Max: 300 * time.Millisecond}, 3, 0, 300 * time.Millisecond},
		{"initial equals max", converge.Backoff{Initial: time.Second, Max: time.Second}, 4, 0, time.Second},
		{"n below 1", converge.Backoff{Initial: time.Second, Max: time.Minute}, 0, 0, time.Second},
		{"retry-after above the ceiling", converge.Backoff{Initial: 50 * time.Millisecond, Max: time.Second}, 1, time.Second, 50 * time.Millisecond},
		{"retry-after below the ceiling", converge.Backoff{Initial: 10 * time.Second, Max: time.Minute}, 1, time.Second, 10 * time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := tc.b.Ceiling(tc.n); got != tc.ceil {
				t.Fatalf("Ceiling(%d) = %s, want %s", tc.n, got, tc.ceil)
			}
			lo, hi := max(tc.ceil/2, tc.retryAfter), max(tc.ceil, tc.retryAfter)
			var seenLow, seenHigh bool
			for range 2000 {
				d := tc.b.Delay(tc.n, tc.retryAfter)
				if d < lo || d > hi {
					t.Fatalf("Delay(%d, %s) = %s, want within [%s, %s]", tc.n, tc.retryAfter, d, lo, hi)
				}
				seenLow = seenLow || d < lo+(hi-lo)/4
				seenHigh = seenHigh || d > hi-(hi-lo)/4
			}
			if hi > lo && (!seenLow || !seenHigh) {
				t.Errorf("Delay(%d) is not spread over [%s, %s]: low quarter seen %t, high quarter %t", tc.n, lo, hi, seenLow, seenHigh)
			}
		})
	}
}

// TestRetryAfterCap: a Retry-After longer than MaxRetryAfter (default 1h)
// is cut to it, in RetryAfterCap and in Delay (SPEC §6).
func TestRetryAfterCap(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		b          converge.Backoff
		retryAfter time.Duration
		want       time.Duration
		cut        bool
	}{
		{"default keeps an hour", converge.Backoff{}, time.Hour, time.Hour, false},
		{"default cuts a year", converge.Backoff{}, 365 * 24 * time.Hour, converge.DefaultMaxRetryAfter, true},
		{"configured", converge.Backoff{MaxRetryAfter: time.Minute}, 2 * time.Minute, time.Minute, true},
		{"below the limit", converge.Backoff{MaxRetryAfter: time.Minute}, 30 * time.Second, 30 * time.Second, false},
		{"none", converge.Backoff{MaxRetryAfter: time.Minute}, 0, 0, false},
	}
	for _, tc := range cases {
		got, cut := tc.b.RetryAfterCap(tc.retryAfter)
		if got != tc.want || cut != tc.cut {
			t.Errorf("%s: RetryAfterCap(%s) = %s, %t; want %s, %t", tc.name, tc.retryAfter, got, cut, tc.want, tc.cut)
		}
	}
	b := converge.Backoff{Initial: time.Millisecond, Max: 2 * time.Millisecond, MaxRetryAfter: time.Second}
	if d := b.Delay(1, 365*24*time.Hour); d != time.Second {
		t.Errorf("Delay with a Retry-After of a year = %s, want the cap of 1s", d)
	}
}
