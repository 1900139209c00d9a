package jobs

import (
	"context"
	"log/slog"
	"runtime"
	"sync"
	"time"

	"github.com/converge-run/converge"
)

// attemptLog is the logger of one attempt: the worker's logger with the
// attempt's attributes (event, run, stream, version, attempt, trace), made
// the first time a line is written at a level the logger has enabled. A
// slog.Logger.With formats its attributes for the handler at once, which
// cost a worker about 2.5 % of its CPU per attempt (docs/benchmarks.md,
// "Process CPU per event") for lines most levels never write; a line that
// is written is the same as with the eager With, source included.
type attemptLog struct {
	base    *slog.Logger
	run     *converge.Run
	attempt int
	traceID string

	once sync.Once
	l    *slog.Logger
}

// logger returns the attempt's logger, made on first use.
func (a *attemptLog) logger() *slog.Logger {
	a.once.Do(func() {
		l := a.base.With("event_id", a.run.EventID, "run_id", a.run.ID, "kind", a.run.Kind, "resource", a.run.Resource, "version", a.run.Version,
			"attempt", a.attempt)
		if a.traceID != "" {
			l = l.With("trace_id", a.traceID)
		}
		a.l = l
	})
	return a.l
}

// enabled reports whether a line at level would be written; callers use it
// to skip building the arguments of a line that would not be.
func (a *attemptLog) enabled(level slog.Level) bool {
	return a.base.Enabled(context.Background(), level)
}

// log writes a line at level as slog.Logger's Info, Warn and so on would,
// with the caller as its source.
func (a *attemptLog) log(level slog.Level, msg string, args ...any) {
	ctx := context.Background()
	if !a.base.Enabled(ctx, level) {
		return
	}
	var pcs [1]uintptr
	runtime.Callers(3, pcs[:]) // skip Callers, log and its Debug/Info/... wrapper
	r := slog.NewRecord(time.Now(), level, msg, pcs[0])
	r.Add(args...)
	_ = a.logger().Handler().Handle(ctx, r)
}

// Debug writes a line at slog.LevelDebug.
func (a *attemptLog) Debug(msg string, args ...any) { a.log(slog.LevelDebug, msg, args...) }

// Info writes a line at slog.LevelInfo.
func (a *attemptLog) Info(msg string, args ...any) { a.log(slog.LevelInfo, msg, args...) }

// Warn writes a line at slog.LevelWarn.
func (a *attemptLog) Warn(msg string, args ...any) { a.log(slog.LevelWarn, msg, args...) }

// Error writes a line at slog.LevelError.
func (a *attemptLog) Error(msg string, args ...any) { a.log(slog.LevelError, msg, args...) }
