package jobs

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/converge-run/converge"
)

// The per-attempt overheads of Work that do not touch the database or the
// target, each against what it replaced (docs/benchmarks.md, "Process CPU
// per event (issue 22, round 3)"), with the logger at Warn as in bench.

func benchRun() *converge.Run {
	return &converge.Run{ID: uuid.New(), EventID: uuid.New(), Kind: "bench", Resource: "resource-0042", Version: 17}
}

func warnLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// BenchmarkAttemptLogEager is the logger Work made before: With at once.
func BenchmarkAttemptLogEager(b *testing.B) {
	base, run := warnLogger(), benchRun()
	b.ReportAllocs()
	for b.Loop() {
		log := base.With("event_id", run.EventID, "run_id", run.ID, "kind", run.Kind, "resource", run.Resource, "version", run.Version,
			"attempt", 1)
		log.Debug("attempt started")
		log.Info("attempt succeeded", "status", converge.RunSucceeded, "duration_ms", int64(3))
	}
}

// BenchmarkAttemptLogLazy is attemptLog.
func BenchmarkAttemptLogLazy(b *testing.B) {
	base, run := warnLogger(), benchRun()
	b.ReportAllocs()
	for b.Loop() {
		log := &attemptLog{base: base, run: run, attempt: 1}
		log.Debug("attempt started")
		if log.enabled(slog.LevelInfo) {
			log.Info("attempt succeeded", "status", converge.RunSucceeded, "duration_ms", int64(3))
		}
	}
}

// BenchmarkHeartbeatGoroutine is the heartbeat Work ran before, for a call
// that ends before the first renewal: a goroutine with a ticker and the
// fence's timer, stopped through the context and waited for.
func BenchmarkHeartbeatGoroutine(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		ctx, cancel := context.WithCancelCause(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			fence := time.AfterFunc(45*time.Second, func() { cancel(errLeaseUnrenewed) })
			defer fence.Stop()
			t := time.NewTicker(5 * time.Second)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
			}
		}()
		cancel(nil)
		<-done
	}
}

// BenchmarkHeartbeatTimers is startHeartbeat and stop.
func BenchmarkHeartbeatTimers(b *testing.B) {
	w := &RunWorker{leaseTTL: time.Minute}
	run, log := benchRun(), &attemptLog{base: warnLogger()}
	b.ReportAllocs()
	for b.Loop() {
		ctx, cancel := context.WithCancelCause(context.Background())
		hb := w.startHeartbeat(ctx, cancel, run, 1, time.Now(), log)
		cancel(nil)
		hb.stop()
	}
}
