package jobs

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// RepeatWindow is how long an error record is not written again after it
// was (repeatLimiter): during a database outage River's producers fail a
// fetch every poll interval, each queue apart, and the promoter a pass every
// interval, which without it wrote about a hundred identical error lines a
// second.
const RepeatWindow = 30 * time.Second

// repeatLimiter is a slog.Handler that writes an error record (level Error
// or above) at most once per window for the same message and queue (the
// attribute River's producers name theirs with); the next one written
// after the window carries repeated, the count of those left out since.
// Other records pass through as they are.
type repeatLimiter struct {
	next   slog.Handler
	window time.Duration
	state  *repeatState
	// queue is a queue attribute the logger was made With.
	queue string
}

// repeatState is what the handlers derived from one repeatLimiter share:
// per message and queue, when it was last written and how many were left
// out since.
type repeatState struct {
	mu   sync.Mutex
	now  func() time.Time
	seen map[repeatKey]*repeatCount
}

type repeatKey struct{ message, queue string }

type repeatCount struct {
	written time.Time
	left    int
}

// newRepeatLimiter wraps next.
func newRepeatLimiter(next slog.Handler, window time.Duration) *repeatLimiter {
	return &repeatLimiter{next: next, window: window, state: &repeatState{now: time.Now, seen: map[repeatKey]*repeatCount{}}}
}

// Enabled implements slog.Handler.
func (h *repeatLimiter) Enabled(ctx context.Context, level slog.Level) bool {
	return h.next.Enabled(ctx, level)
}

// Handle implements slog.Handler.
func (h *repeatLimiter) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < slog.LevelError {
		return h.next.Handle(ctx, r)
	}
	key := repeatKey{message: r.Message, queue: h.queue}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "queue" {
			key.queue = a.Value.String()
			return false
		}
		return true
	})
	s := h.state
	s.mu.Lock()
	now := s.now()
	c := s.seen[key]
	if c != nil && now.Sub(c.written) < h.window {
		c.left++
		s.mu.Unlock()
		return nil
	}
	if c == nil {
		if len(s.seen) >= maxRepeatKeys {
			clear(s.seen) // a bound on the memory, not on the lines
		}
		c = &repeatCount{}
		s.seen[key] = c
	}
	left := c.left
	c.left, c.written = 0, now
	s.mu.Unlock()
	if left > 0 {
		r = r.Clone()
		r.AddAttrs(slog.Int("repeated", left))
	}
	return h.next.Handle(ctx, r)
}

// maxRepeatKeys bounds the messages a repeatLimiter remembers.
const maxRepeatKeys = 1024

// WithAttrs implements slog.Handler.
func (h *repeatLimiter) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	c.next = h.next.WithAttrs(attrs)
	for _, a := range attrs {
		if a.Key == "queue" {
			c.queue = a.Value.String()
		}
	}
	return &c
}

// WithGroup implements slog.Handler.
func (h *repeatLimiter) WithGroup(name string) slog.Handler {
	c := *h
	c.next = h.next.WithGroup(name)
	return &c
}
