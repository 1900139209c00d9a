package invariant

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
)

// CallOutcome is how a call ended, as the target saw it.
type CallOutcome string

// Call outcomes.
const (
	// CallSucceeded: the target answered 2xx.
	CallSucceeded CallOutcome = "succeeded"
	// CallTransient: the target answered a status converge retries (408,
	// 425, 429, 5xx).
	CallTransient CallOutcome = "transient_error"
	// CallPermanent: the target answered any other status.
	CallPermanent CallOutcome = "permanent_error"
	// CallCancelled: the client went away (its context was cancelled, or
	// its process died) before the answer. End is the moment the target
	// noticed, which is a little after the client let go.
	CallCancelled CallOutcome = "cancelled"
)

// Call is one request the target received.
type Call struct {
	Kind     string
	Resource string
	Version  int64
	EventID  uuid.UUID
	RunID    uuid.UUID
	Attempt  int
	// Path is the request's path. Giving each process its own target URL
	// (…/build/w1, …/build/w2) tells which process made a call.
	Path string
	// Start is when the handler was entered; End is just before the answer
	// was written, or when the target noticed that the client went away.
	// Both are read from the target process's clock.
	Start time.Time
	End   time.Time
	// Outcome is how the call ended; Status the status answered (0 when
	// cancelled).
	Outcome CallOutcome
	Status  int
}

// Stream is "kind resource", the key rules are checked per.
func (c Call) Stream() string { return c.Kind + " " + c.Resource }

func (c Call) String() string {
	return fmt.Sprintf("%s@%d run %s attempt %d [%s → %s] %s",
		c.Stream(), c.Version, c.RunID, c.Attempt, c.Start.Format("15:04:05.000000"), c.End.Format("15:04:05.000000"), c.Outcome)
}

// TargetConfig sets how a Target behaves.
type TargetConfig struct {
	// MinLatency and MaxLatency bound the time a call takes: a duration
	// drawn uniformly between them. The wait stops at once when the client
	// goes away.
	MinLatency time.Duration
	MaxLatency time.Duration
	// TransientRate is the fraction of calls answered 503 after the
	// latency.
	TransientRate float64
	// Respond, when set, decides the answer after the latency in place of
	// TransientRate: it returns the HTTP status to answer. It may block
	// (to hold a call in flight); it must return soon after ctx is done,
	// and its status is then ignored (the call counts as cancelled).
	Respond func(ctx context.Context, c Call) int
}

// Target is a fake HTTP target that logs every call converge makes. It
// implements http.Handler; serve it with httptest.NewServer.
type Target struct {
	cfg TargetConfig

	mu       sync.Mutex
	calls    []Call
	inFlight map[*Call]struct{}
}

// NewTarget returns a Target.
func NewTarget(cfg TargetConfig) *Target {
	if cfg.MaxLatency < cfg.MinLatency {
		cfg.MaxLatency = cfg.MinLatency
	}
	return &Target{cfg: cfg, inFlight: map[*Call]struct{}{}}
}

// request is the body converge sends (SPEC §5).
type request struct {
	EventID  uuid.UUID `json:"event_id"`
	RunID    uuid.UUID `json:"run_id"`
	Attempt  int       `json:"attempt"`
	Kind     string    `json:"kind"`
	Resource string    `json:"resource"`
	Version  int64     `json:"version"`
}

// ServeHTTP implements http.Handler.
func (t *Target) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	// The body is read to its end: only then does net/http watch the
	// connection and cancel r.Context() when the client closes it.
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(w, "read body", http.StatusBadRequest)
		return
	}
	var req request
	if err := json.Unmarshal(body, &req); err != nil {
		http.Error(w, "bad json", http.StatusBadRequest)
		return
	}
	c := &Call{Kind: req.Kind, Resource: req.Resource, Version: req.Version, EventID: req.EventID,
		RunID: req.RunID, Attempt: req.Attempt, Path: r.URL.Path, Start: start}
	t.mu.Lock()
	t.inFlight[c] = struct{}{}
	t.mu.Unlock()

	ctx := r.Context()
	status := t.answer(ctx, *c)
	// Whichever happened first: the client went away, or the answer is
	// ready. Both are read right here, so that End is as early as the
	// target can know it.
	end, outcome := time.Now(), CallCancelled
	if ctx.Err() == nil {
		outcome = outcomeOf(status)
	} else {
		status = 0
	}
	t.mu.Lock()
	c.End, c.Outcome, c.Status = end, outcome, status
	delete(t.inFlight, c)
	t.calls = append(t.calls, *c)
	t.mu.Unlock()
	if outcome == CallCancelled {
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = fmt.Fprintf(w, `{"run_id":%q,"attempt":%d,"version":%d}`, req.RunID, req.Attempt, req.Version)
}

// answer waits out the latency (or until ctx is done) and decides the
// status.
func (t *Target) answer(ctx context.Context, c Call) int {
	d := t.cfg.MinLatency
	if span := t.cfg.MaxLatency - t.cfg.MinLatency; span > 0 {
		d += rand.N(span + 1)
	}
	if d > 0 {
		timer := time.NewTimer(d)
		select {
		case <-ctx.Done():
			timer.Stop()
			return 0
		case <-timer.C:
		}
	}
	if t.cfg.Respond != nil {
		return t.cfg.Respond(ctx, c)
	}
	if t.cfg.TransientRate > 0 && rand.Float64() < t.cfg.TransientRate {
		return http.StatusServiceUnavailable
	}
	return http.StatusOK
}

func outcomeOf(status int) CallOutcome {
	switch {
	case status >= 200 && status < 300:
		return CallSucceeded
	case status == 408 || status == 425 || status == 429 || status >= 500:
		return CallTransient
	default:
		return CallPermanent
	}
}

// Calls returns the calls that have ended, in the order they ended.
func (t *Target) Calls() []Call {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.calls)
}

// InFlight returns the calls in progress, oldest first.
func (t *Target) InFlight() []Call {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]Call, 0, len(t.inFlight))
	for c := range t.inFlight {
		out = append(out, *c)
	}
	slices.SortFunc(out, func(a, b Call) int { return a.Start.Compare(b.Start) })
	return out
}
