package converge_test

import (
	"testing"
	"time"

	"github.com/converge-run/converge"
)

// TestParseDuration: Go's durations, a leading count of days, and no
// duration past what time.Duration holds (about 106,751 days).
func TestParseDuration(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]time.Duration{
		"720h": 720 * time.Hour, "30d": 30 * 24 * time.Hour, "1d12h": 36 * time.Hour, "0d": 0, "2d+1h": 49 * time.Hour,
		"106751d23h47m16s": time.Duration(1<<63 - 1).Truncate(time.Second),
	} {
		if got, err := converge.ParseDuration(s); err != nil || got != want {
			t.Errorf("ParseDuration(%q) = %s, %v; want %s", s, got, err, want)
		}
	}
	for _, s := range []string{"d", "1dd", "+1d", "1d-1h", "106752d", "106751d23h48m", "99999999999999999999d", "soon"} {
		if got, err := converge.ParseDuration(s); err == nil {
			t.Errorf("ParseDuration(%q) = %s, want an error", s, got)
		}
	}
}
