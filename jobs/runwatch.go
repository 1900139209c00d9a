package jobs

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/converge-run/converge/store"
)

// RunWatchInterval is how often a worker process asks the database whether
// any run it is calling a target for has ended (superseded or cancelled).
const RunWatchInterval = 250 * time.Millisecond

// runWatch stops the calls of runs that ended while their attempt was in
// flight. A supersession or an operator's cancel cancels the run's River
// job, which reaches the worker by LISTEN/NOTIFY (or River's poll of
// cancelled jobs, every few seconds), and the attempt's heartbeat notices
// too, but only every quarter of rescue_after (up to 5 s). Notifications
// are lost when connections die, and not sent at all through a pooler,
// so the watch asks for all of the process's calls in one query every
// RunWatchInterval and cancels those whose run has ended: a superseded
// run's call stops within a second without relying on notifications
// (SPEC §15).
type runWatch struct {
	store    *store.Store
	interval time.Duration
	logger   *slog.Logger
	loop     loop

	mu    sync.Mutex
	calls map[*watchedCall]struct{}
}

// watchedCall is one call in flight: its run and how to stop it.
type watchedCall struct {
	runID  uuid.UUID
	cancel context.CancelCauseFunc
}

func newRunWatch(st *store.Store, interval time.Duration, logger *slog.Logger) *runWatch {
	return &runWatch{store: st, interval: interval, logger: logger, calls: map[*watchedCall]struct{}{}}
}

// add watches the call of run runID, stopped with cancel; the returned
// function ends the watch.
func (w *runWatch) add(runID uuid.UUID, cancel context.CancelCauseFunc) func() {
	c := &watchedCall{runID: runID, cancel: cancel}
	w.mu.Lock()
	w.calls[c] = struct{}{}
	w.mu.Unlock()
	return func() {
		w.mu.Lock()
		delete(w.calls, c)
		w.mu.Unlock()
	}
}

// Start starts the watch in the background until Stop.
func (w *runWatch) Start(ctx context.Context) {
	w.loop.start(ctx, w.interval, w.once)
}

// Stop stops the watch and waits for a pass in progress.
func (w *runWatch) Stop() { w.loop.stop() }

// once makes one pass: one query for every call in flight.
func (w *runWatch) once(ctx context.Context) {
	w.mu.Lock()
	if len(w.calls) == 0 {
		w.mu.Unlock()
		return
	}
	ids := make([]uuid.UUID, 0, len(w.calls))
	seen := make(map[uuid.UUID]bool, len(w.calls))
	for c := range w.calls {
		if !seen[c.runID] {
			seen[c.runID] = true
			ids = append(ids, c.runID)
		}
	}
	w.mu.Unlock()
	qctx, cancel := context.WithTimeout(ctx, max(w.interval*4, time.Second))
	ended, err := w.store.RunEndedList(qctx, ids)
	cancel()
	if err != nil {
		// The heartbeat's fence stops the calls if this lasts.
		if ctx.Err() == nil {
			w.logger.Debug("watch runs in flight", "error", err)
		}
		return
	}
	if len(ended) == 0 {
		return
	}
	gone := make(map[uuid.UUID]bool, len(ended))
	for _, id := range ended {
		gone[id] = true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for c := range w.calls {
		if gone[c.runID] {
			c.cancel(errLeaseLost)
			delete(w.calls, c)
		}
	}
}
