package jobs

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
)

// TestAttemptLogSameLines holds attemptLog to the eager With it replaced:
// the same lines, attributes and order at every level, nothing below the
// handler's level, and the caller as the source.
func TestAttemptLogSameLines(t *testing.T) {
	run := benchRun()
	for _, level := range []slog.Level{slog.LevelDebug, slog.LevelInfo, slog.LevelWarn} {
		var eagerOut, lazyOut bytes.Buffer
		opts := &slog.HandlerOptions{Level: level, AddSource: true,
			ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
				switch a.Key {
				case slog.TimeKey:
					return slog.Attr{}
				case slog.SourceKey:
					// The function only: the lines of the two calls differ.
					return slog.String(a.Key, a.Value.Any().(*slog.Source).Function)
				}
				return a
			}}
		eager := slog.New(slog.NewJSONHandler(&eagerOut, opts)).With("event_id", run.EventID, "run_id", run.ID, "kind", run.Kind,
			"resource", run.Resource, "version", run.Version, "attempt", 3).With("trace_id", "abc")
		lazy := &attemptLog{base: slog.New(slog.NewJSONHandler(&lazyOut, opts)), run: run, attempt: 3, traceID: "abc"}

		eager.Debug("attempt started")
		eager.Info("attempt succeeded", "status", "succeeded", "duration_ms", int64(5))
		eager.Warn("renew lease", "error", "boom")
		eager.Error("record attempt outcome", "error", "gone")
		lazy.Debug("attempt started")
		lazy.Info("attempt succeeded", "status", "succeeded", "duration_ms", int64(5))
		lazy.Warn("renew lease", "error", "boom")
		lazy.Error("record attempt outcome", "error", "gone")

		if eagerOut.String() != lazyOut.String() {
			t.Fatalf("level %s:\neager %s\n lazy %s", level, eagerOut.String(), lazyOut.String())
		}
		for line := range strings.Lines(lazyOut.String()) {
			var rec map[string]any
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatal(err)
			}
			if src, _ := rec[slog.SourceKey].(string); !strings.HasSuffix(src, "TestAttemptLogSameLines") {
				t.Fatalf("source %q, want the caller", src)
			}
		}
	}
}
