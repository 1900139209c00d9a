package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestLogFormat checks newLogger's two formats: one JSON object a line by
// default (--log-format json), slog's key=value text with text, and the
// level filter of both.
func TestLogFormat(t *testing.T) {
	t.Parallel()
	var js, text strings.Builder
	newLogger(&js, "info", "json").Info("event accepted", "event_id", "e1", "run_id", "r1", "trace_id", "t1")
	newLogger(&js, "info", "json").Debug("attempt started")
	newLogger(&text, "debug", "text").Debug("attempt started", "run_id", "r1")
	var rec map[string]any
	lines := strings.Split(strings.TrimSpace(js.String()), "\n")
	if len(lines) != 1 || json.Unmarshal([]byte(lines[0]), &rec) != nil {
		t.Fatalf("json logger wrote %q, want one JSON line (debug filtered out at info)", js.String())
	}
	if rec["msg"] != "event accepted" || rec["event_id"] != "e1" || rec["run_id"] != "r1" || rec["trace_id"] != "t1" {
		t.Errorf("json record %v", rec)
	}
	if got := text.String(); !strings.Contains(got, `level=DEBUG msg="attempt started" run_id=r1`) {
		t.Errorf("text logger wrote %q", got)
	}
}
