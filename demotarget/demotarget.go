package demotarget

import (
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"sync/atomic"
	"time"
)

// Options shape the simulated behaviour.
type Options struct {
	Latency       time.Duration // mean call latency; each call takes 0.5–1.5× of it
	TransientRate float64       // share of calls answered 503
	PermanentRate float64       // share of calls answered 422
}

// Handler answers POST requests as a target would and GET /stats with its
// counters.
type Handler struct {
	opts                            Options
	calls, ok, transient, permanent atomic.Int64
}

// New returns a Handler.
func New(opts Options) *Handler { return &Handler{opts: opts} }

// Stats are the handler's counters.
type Stats struct {
	Calls     int64 `json:"calls"`
	Succeeded int64 `json:"succeeded"`
	Transient int64 `json:"transient"`
	Permanent int64 `json:"permanent"`
}

// Stats returns the counters so far.
func (h *Handler) Stats() Stats {
	return Stats{Calls: h.calls.Load(), Succeeded: h.ok.Load(), Transient: h.transient.Load(), Permanent: h.permanent.Load()}
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	if r.Method == http.MethodGet && r.URL.Path == "/stats" {
		_ = json.NewEncoder(w).Encode(h.Stats())
		return
	}
	if r.Method != http.MethodPost {
		w.WriteHeader(http.StatusMethodNotAllowed)
		return
	}
	h.calls.Add(1)
	var body struct {
		RunID    string `json:"run_id"`
		Resource string `json:"resource"`
		Version  int64  `json:"version"`
		Attempt  int    `json:"attempt"`
		Payload  struct {
			Fail string `json:"fail"`
		} `json:"payload"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&body); err != nil {
		h.permanent.Add(1)
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"error":"body is not the JSON converge sends"}`))
		return
	}
	if d := h.opts.Latency; d > 0 {
		d = d/2 + rand.N(d+1)
		select {
		case <-time.After(d):
		case <-r.Context().Done():
			return
		}
	}
	roll := rand.Float64()
	switch {
	case body.Payload.Fail == "permanent" || (body.Payload.Fail == "" && roll < h.opts.PermanentRate):
		h.permanent.Add(1)
		w.WriteHeader(http.StatusUnprocessableEntity)
		_, _ = w.Write([]byte(`{"error":"the request is invalid (a permanent failure of the demo target)"}`))
	case body.Payload.Fail == "transient" || (body.Payload.Fail == "" && roll < h.opts.PermanentRate+h.opts.TransientRate):
		h.transient.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"error":"temporarily unavailable (a transient failure of the demo target)"}`))
	default:
		h.ok.Add(1)
		_ = json.NewEncoder(w).Encode(map[string]any{
			"resource": body.Resource, "version": body.Version, "attempt": body.Attempt,
			"artifact": body.Resource + "@" + time.Now().UTC().Format("20060102T150405Z"),
		})
	}
}
