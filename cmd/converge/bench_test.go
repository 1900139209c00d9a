package main

import (
	"encoding/json"
	"os"
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
			if c.name == "pipeline" || c.name == "ingest" {
				for _, key := range []string{"checkpoints", "anchor_checkpoints"} {
					if n, ok := got[key].(float64); !ok || n < 0 {
						t.Errorf("%s = %v, want a count", key, got[key])
					}
				}
				if got["server"] != "given" {
					t.Errorf("server = %v, want given (--database-url)", got["server"])
				}
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

// TestBenchPrivateServer: with no database URL, a benchmark starts a server
// of its own with the benchmark settings, reports it and how many
// checkpoints fell in the run, and removes its folder at the end.
func TestBenchPrivateServer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a PostgreSQL server")
	}
	pgtest.URL(t) // skips without PostgreSQL (binaries) unless TEST_REQUIRE_DB=1
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	var stdout, stderr testkit.Buffer
	args := []string{"bench", "pipeline", "--json", "--events", "200", "--streams", "20", "--workers", "10", "--pool", "4"}
	if err := run(t.Context(), args, func(string) string { return "" }, &stdout, &stderr); err != nil {
		t.Fatalf("converge %s: %v\nstderr:\n%s", strings.Join(args, " "), err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "starting a private PostgreSQL server") {
		t.Errorf("stderr does not say a private server started:\n%s", stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	var got map[string]any
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &got); err != nil {
		t.Fatalf("last line is not a JSON object: %v\nstdout:\n%s", err, stdout.String())
	}
	if got["server"] != "private" {
		t.Errorf("server = %v, want private", got["server"])
	}
	for _, key := range []string{"checkpoints", "anchor_checkpoints"} {
		if n, ok := got[key].(float64); !ok || n != 0 {
			t.Errorf("%s = %v, want 0 (max_wal_size keeps them out of the measured phases)", key, got[key])
		}
	}
	if v, _ := got["rate"].(float64); v <= 0 {
		t.Errorf("rate = %v, want a positive number", got["rate"])
	}
	left, err := os.ReadDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range left {
		if strings.HasPrefix(e.Name(), "converge-bench-pg-") {
			t.Errorf("the private server's folder %s is still there", e.Name())
		}
	}

	// A server given and asked for at once is a usage error.
	err = run(t.Context(), []string{"bench", "storm", "--private-server", "--database-url", "postgres://x@127.0.0.1:1/x"}, func(string) string { return "" }, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "give one") {
		t.Errorf("--private-server with --database-url: %v, want a usage error", err)
	}
}
