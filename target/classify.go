package target

import (
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/converge-run/converge"
)

// Classify returns the class of an HTTP response with the given status, or
// "" when the response is a success.
//
// A status listed in permanent is permanent, then one listed in transient is
// transient (NewHTTP refuses a status in both lists). Otherwise 2xx is a
// success; 408, 425, 429 and 5xx are transient; anything else (1xx, 3xx,
// the other 4xx) is permanent. The overrides apply to 2xx as well, so a
// target may, for example, list 202 as transient to be called again until it
// answers 200.
func Classify(status int, transient, permanent []int) converge.ErrorClass {
	switch {
	case slices.Contains(permanent, status):
		return converge.ClassPermanent
	case slices.Contains(transient, status):
		return converge.ClassTransient
	case status >= 200 && status <= 299:
		return ""
	case status == http.StatusRequestTimeout, status == http.StatusTooEarly,
		status == http.StatusTooManyRequests, status >= 500 && status <= 599:
		return converge.ClassTransient
	}
	return converge.ClassPermanent
}

// ParseRetryAfter returns the delay asked for by a Retry-After header value h
// received at now: either a number of seconds or an HTTP date. It returns 0
// for an empty, malformed, negative or past value. It does not cap the
// delay; that is the retry policy's business.
func ParseRetryAfter(h string, now time.Time) time.Duration {
	h = strings.TrimSpace(h)
	if h == "" {
		return 0
	}
	if h[0] >= '0' && h[0] <= '9' {
		secs, err := strconv.ParseUint(h, 10, 64)
		if err != nil {
			if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange {
				return math.MaxInt64
			}
			return 0
		}
		if secs > math.MaxInt64/uint64(time.Second) {
			return math.MaxInt64
		}
		return time.Duration(secs) * time.Second
	}
	t, err := http.ParseTime(h)
	if err != nil {
		return 0
	}
	return max(t.Sub(now), 0)
}
