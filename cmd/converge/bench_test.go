package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/converge-run/converge/test/pgtest"
	"github.com/converge-run/converge/test/testkit"
)

// TestBenchSmoke runs every benchmark at a tiny size and checks only the
// shape of its JSON line: it is a test of the code, never of timing.
func TestBenchSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("benchmarks create scratch databases")
	}
	url := pgtest.URL(t)
	small := []string{"--workers", "10", "--pool", "4"}
	cases := []struct {
		name string
		args []string
	}{
		{"pipeline", append([]string{"--events", "200", "--streams", "20"}, small...)},
		{"ingest", append([]string{"--events", "200", "--clients", "8"}, small...)},
		{"storm", append([]string{"--events", "5", "--streams", "10", "--bursts", "2", "--latency", "1ms"}, small...)},
		{"dlq", append([]string{"--events", "500", "--samples", "2"}, small...)},
		{"workflow", append([]string{"--events", "60", "--streams", "10"}, small...)},
		{"history", append([]string{"--events", "2000", "--samples", "2"}, small...)},
		{"soak", append([]string{"--duration", "12s", "--rate", "20", "--retain", "2s", "--prune-interval", "1s"}, small...)},
		// pipeline --tracing: traced (OTLP to a receiver of its own) against untraced.
		{"pipeline --tracing", append([]string{"--events", "200", "--streams", "20"}, small...)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// The benchmark's progress lines and its workers' log share
			// stderr from several goroutines: a buffer safe for that.
			var stdout, stderr testkit.Buffer
			args := append(append([]string{"bench"}, strings.Fields(c.name)...), append([]string{"--json", "--database-url", url}, c.args...)...)
			if err := run(t.Context(), args, func(string) string { return "" }, &stdout, &stderr); err != nil {
				t.Fatalf("converge %s: %v\nstderr:\n%s", strings.Join(args, " "), err, stderr.String())
			}
			lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
			var got map[string]any
			if err := json.Unmarshal([]byte(lines[len(lines)-1]), &got); err != nil {
				t.Fatalf("last line is not a JSON object: %v\nstdout:\n%s", err, stdout.String())
			}
			if name := strings.Fields(c.name)[0]; got["benchmark"] != name {
				t.Errorf("benchmark = %v, want %s", got["benchmark"], name)
			}
			if strings.Contains(c.name, "--tracing") {
				if v, _ := got["otlp_exports"].(float64); v <= 0 {
					t.Errorf("otlp_exports = %v: the traced runs exported nothing", got["otlp_exports"])
				}
			}
			for _, key := range []string{"rate", "anchor_rate", "ratio", "p50_ms", "p95_ms", "p99_ms"} {
				v, ok := got[key].(float64)
				if !ok || v <= 0 {
					t.Errorf("%s = %v, want a positive number", key, got[key])
				}
			}
		})
	}
}
