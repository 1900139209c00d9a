package converge

import (
	"fmt"
	"regexp"
	"strconv"
	"time"
)

// daysPrefix is a leading count of days in a duration: "30d", "1d12h".
var daysPrefix = regexp.MustCompile(`^(\d+)d(.*)$`)

// ParseDuration is time.ParseDuration that also accepts a leading count of
// days ("30d", "1d12h", a day being 24 hours), as the configuration's
// durations and a purge's older_than do.
func ParseDuration(s string) (time.Duration, error) {
	m := daysPrefix.FindStringSubmatch(s)
	if m == nil {
		return time.ParseDuration(s)
	}
	days, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil || days > int64(time.Duration(1<<63-1)/(24*time.Hour)) {
		return 0, fmt.Errorf("duration %q: too many days", s)
	}
	d := time.Duration(days) * 24 * time.Hour
	if m[2] == "" {
		return d, nil
	}
	rest, err := time.ParseDuration(m[2])
	if err != nil || rest < 0 || rest > time.Duration(1<<63-1)-d {
		return 0, fmt.Errorf("duration %q: bad part after the days", s)
	}
	return d + rest, nil
}
