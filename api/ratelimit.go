package api

import (
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/httprate"

	"github.com/converge-run/converge"
)

// newRateLimiter returns the per-actor limiter of cfg, or nil when rate
// limiting is off (RateLimit 0).
func newRateLimiter(cfg Config) *httprate.RateLimiter {
	if cfg.RateLimit <= 0 {
		return nil
	}
	window := cfg.RateWindow
	if window <= 0 {
		window = time.Second
	}
	retryAfter := strconv.Itoa(max(1, int(math.Ceil(window.Seconds()))))
	return httprate.NewRateLimiter(cfg.RateLimit, window,
		httprate.WithKeyFuncs(func(r *http.Request) (string, error) {
			// authenticate runs first, so there is always an actor; the
			// fallback only keeps a wiring mistake from sharing one bucket
			// silently with real actors.
			if a := converge.ActorFrom(r.Context()); a != nil {
				return "actor:" + a.Name, nil
			}
			return "anonymous", nil
		}),
		httprate.WithLimitHandler(func(w http.ResponseWriter, r *http.Request) {
			// httprate sets Retry-After to the window in whole seconds,
			// which is 0 for windows under a second.
			w.Header().Set("Retry-After", retryAfter)
			writeProblem(w, r, converge.Errorf(eRateLimited, "too many requests for this token: the limit is %d per %s", cfg.RateLimit, window))
		}),
		httprate.WithErrorHandler(func(w http.ResponseWriter, r *http.Request, err error) {
			writeProblem(w, r, converge.Errorf(converge.EINTERNAL, "internal error"))
		}),
	)
}

// rateLimit limits each authenticated actor (token name) to
// Config.RateLimit requests per Config.RateWindow, answering 429
// rate-limited with Retry-After beyond it. It runs after authenticate, so
// that it can key by actor; it passes everything through when no limit is
// configured.
func (s *Server) rateLimit(next http.Handler) http.Handler {
	if s.limiter == nil {
		return next
	}
	return s.limiter.Handler(next)
}
