package jobs

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestRepeatLimiter: an error record is written once per window for its
// message and queue, the next one after the window says how many were left
// out; records below Error, and errors of another message or queue (as an
// attribute of the record or of the logger), are written as they come.
func TestRepeatLimiter(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	h := newRepeatLimiter(slog.NewJSONHandler(&buf, nil), 30*time.Second)
	now := time.Unix(1_800_000_000, 0)
	h.state.now = func() time.Time { return now }
	log := slog.New(h).With("component", "river")
	q2 := log.With("queue", "deploy")

	for range 100 {
		log.Error("producer: Error fetching jobs", "queue", "build", "err", "connection refused")
		log.Warn("job cancelled remotely", "job_id", 1)
		now = now.Add(50 * time.Millisecond)
	}
	log.Error("producer: Error fetching jobs", "queue", "notify", "err", "connection refused")
	q2.Error("producer: Error fetching jobs", "err", "connection refused")
	q2.Error("producer: Error fetching jobs", "err", "connection refused")
	log.Error("promote scheduled jobs", "error", "connection refused")
	now = now.Add(30 * time.Second)
	log.Error("producer: Error fetching jobs", "queue", "build", "err", "connection refused")

	type line struct {
		Level, Msg, Queue string
		Repeated          int
	}
	var lines []line
	for l := range strings.Lines(buf.String()) {
		var r line
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		lines = append(lines, r)
	}
	count := func(level, msg, queue string) (n, repeated int) {
		for _, l := range lines {
			if l.Level == level && l.Msg == msg && l.Queue == queue {
				n++
				repeated += l.Repeated
			}
		}
		return n, repeated
	}
	if n, rep := count("ERROR", "producer: Error fetching jobs", "build"); n != 2 || rep != 99 {
		t.Errorf("build's fetch errors: %d lines repeating %d, want 2 lines, the second repeating 99", n, rep)
	}
	if n, _ := count("WARN", "job cancelled remotely", ""); n != 100 {
		t.Errorf("warnings: %d lines, want all 100", n)
	}
	for _, q := range []string{"notify", "deploy"} {
		if n, _ := count("ERROR", "producer: Error fetching jobs", q); n != 1 {
			t.Errorf("%s's fetch errors: %d lines, want 1", q, n)
		}
	}
	if n, _ := count("ERROR", "promote scheduled jobs", ""); n != 1 {
		t.Errorf("another message: %d lines, want 1", n)
	}
}
