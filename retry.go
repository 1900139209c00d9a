package converge

import (
	"math/rand/v2"
	"time"
)

// DefaultMaxRetryAfter is the longest Retry-After honoured when a kind
// sets no backoff.max_retry_after (SPEC §6).
const DefaultMaxRetryAfter = time.Hour

// Backoff is a kind's retry delay policy.
type Backoff struct {
	Initial time.Duration
	Max     time.Duration
	// MaxRetryAfter is the longest Retry-After honoured; a longer one is
	// cut to it. Zero is DefaultMaxRetryAfter.
	MaxRetryAfter time.Duration
}

// RetryAfterCap returns the Retry-After a target asked for, cut to
// MaxRetryAfter, and whether it was cut.
func (b Backoff) RetryAfterCap(retryAfter time.Duration) (time.Duration, bool) {
	limit := b.MaxRetryAfter
	if limit <= 0 {
		limit = DefaultMaxRetryAfter
	}
	if retryAfter > limit {
		return limit, true
	}
	return retryAfter, false
}

// Ceiling returns the upper bound of the delay before attempt n+1, after n
// attempts have failed: min(Max, Initial·2^(n-1)).
func (b Backoff) Ceiling(n int) time.Duration {
	if n < 1 {
		n = 1
	}
	d := b.Initial
	for i := 1; i < n; i++ {
		if d >= b.Max/2 {
			return b.Max
		}
		d *= 2
	}
	return min(d, b.Max)
}

// Delay returns the delay before attempt n+1: drawn uniformly from the upper
// half of Ceiling(n), never below retryAfter cut to MaxRetryAfter
// (RetryAfterCap).
func (b Backoff) Delay(n int, retryAfter time.Duration) time.Duration {
	c := b.Ceiling(n)
	half := c / 2
	d := half
	if span := c - half; span > 0 {
		d += rand.N(span + 1)
	}
	retryAfter, _ = b.RetryAfterCap(retryAfter)
	return max(d, retryAfter)
}
