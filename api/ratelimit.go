package api

import (
	"math"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/converge-run/converge"
)

// rateLimiter counts requests per key in fixed windows: at most limit per
// window, each key's window starting at its first request. Because the
// window is fixed it knows exactly when the next slot frees: at the end of
// the key's window, which Retry-After and RateLimit-Reset give.
type rateLimiter struct {
	limit  int
	window time.Duration
	now    func() time.Time

	mu        sync.Mutex
	buckets   map[string]*rateBucket
	lastSweep time.Time
}

type rateBucket struct {
	start time.Time
	count int
}

// rateDecision is what the limiter decided for one request.
type rateDecision struct {
	allowed   bool
	remaining int
	// reset is how long until the key's window ends and its budget is
	// whole again.
	reset time.Duration
}

func newLimiter(limit int, window time.Duration) *rateLimiter {
	if window <= 0 {
		window = time.Second
	}
	return &rateLimiter{limit: limit, window: window, now: time.Now, buckets: map[string]*rateBucket{}}
}

// take counts one request of key.
func (l *rateLimiter) take(key string) rateDecision {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if now.Sub(l.lastSweep) > l.window {
		// Forget the buckets whose window is over, so that memory is
		// bounded by the keys seen in one window.
		for k, b := range l.buckets {
			if now.Sub(b.start) >= l.window {
				delete(l.buckets, k)
			}
		}
		l.lastSweep = now
	}
	b := l.buckets[key]
	if b == nil || now.Sub(b.start) >= l.window {
		b = &rateBucket{start: now}
		l.buckets[key] = b
	}
	reset := b.start.Add(l.window).Sub(now)
	if b.count >= l.limit {
		return rateDecision{reset: reset}
	}
	b.count++
	return rateDecision{allowed: true, remaining: l.limit - b.count, reset: reset}
}

// seconds rounds d up to whole seconds, at least 1: a client that waits
// that long finds a slot.
func seconds(d time.Duration) string {
	return strconv.Itoa(max(1, int(math.Ceil(d.Seconds()))))
}

// newRateLimiter returns the per-actor limiter of cfg, or nil when rate
// limiting is off (RateLimit 0).
func newRateLimiter(cfg Config) *rateLimiter {
	if cfg.RateLimit <= 0 {
		return nil
	}
	return newLimiter(cfg.RateLimit, cfg.RateWindow)
}

// rateLimit limits each authenticated actor (token name) to
// Config.RateLimit requests per Config.RateWindow. Every response it lets
// through or refuses carries RateLimit-Limit, RateLimit-Remaining and
// RateLimit-Reset (seconds until the budget is whole again); beyond the
// limit the answer is 429 rate-limited with Retry-After, the seconds until
// a slot frees. It runs after authenticate, so that it can key by actor; it
// passes everything through when no limit is configured.
func (s *Server) rateLimit(next http.Handler) http.Handler {
	l := s.limiter
	if l == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// authenticate runs first, so there is always an actor; the
		// fallback only keeps a wiring mistake from sharing one bucket
		// silently with real actors.
		key := "anonymous"
		if a := converge.ActorFrom(r.Context()); a != nil {
			key = "actor:" + a.Name
		}
		if l.refuse(w, r, key, "this token") {
			return
		}
		next.ServeHTTP(w, r)
	})
}

// hookRateLimit limits the deliveries to each source from each client
// address to Config.RateLimit per Config.RateWindow (SPEC §4: per source
// and client address for /hooks, which has no token), with the headers
// and the 429 of rateLimit. It runs before the signature is checked, so
// that a flood of forged deliveries costs no HMAC beyond the limit.
func (s *Server) hookRateLimit(next http.Handler) http.Handler {
	l := s.limiter
	if l == nil {
		return next
	}
	known := map[string]bool{}
	for _, name := range s.cfg.HookSources {
		known[name] = true
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.HookSources != nil && !known[chi.URLParam(r, "source")] {
			// No such source: the handler's 404, no bucket.
			next.ServeHTTP(w, r)
			return
		}
		client := r.RemoteAddr
		if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
			client = host
		}
		if l.refuse(w, r, "hook:"+chi.URLParam(r, "source")+"|"+client, "this source from this address") {
			// A refused delivery is a rejected event whose kind no rule
			// has read yet, as POST /v1/events counts its own 429.
			s.cfg.Metrics.EventRejected("", eRateLimited)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// refuse counts one request of key and sets the RateLimit-* headers;
// beyond the limit it answers 429 rate-limited with Retry-After (whom
// names the budget in the detail) and reports true.
func (l *rateLimiter) refuse(w http.ResponseWriter, r *http.Request, key, whom string) bool {
	d := l.take(key)
	h := w.Header()
	h.Set("RateLimit-Limit", strconv.Itoa(l.limit))
	h.Set("RateLimit-Remaining", strconv.Itoa(d.remaining))
	h.Set("RateLimit-Reset", seconds(d.reset))
	if d.allowed {
		return false
	}
	h.Set("Retry-After", seconds(d.reset))
	writeProblem(w, r, converge.Errorf(eRateLimited, "too many requests for %s: the limit is %d per %s; a slot frees in %s",
		whom, l.limit, l.window, seconds(d.reset)+"s"))
	return true
}
