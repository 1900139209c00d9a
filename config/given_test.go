package config_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/converge-run/converge/config"
)

// TestExplicitZeroRefused: a key written out with a zero (or empty) value
// that the key does not allow stops start-up naming the key (SPEC §7),
// where leaving the key out gives its default.
func TestExplicitZeroRefused(t *testing.T) {
	t.Parallel()
	const kind = "kinds:\n  build:\n    target: {http: {url: http://127.0.0.1:9000/build}}\n"
	const notif = "notifications:\n  - {url: http://127.0.0.1:9/n, on: [dead_letter.created]"
	cases := []struct{ name, yaml, key string }{
		{"max_attempts", kind + "    max_attempts: 0\n", "kinds.build.max_attempts"},
		{"concurrency", kind + "    concurrency: 0\n", "kinds.build.concurrency"},
		{"backoff.initial", kind + "    backoff: {initial: 0s}\n", "kinds.build.backoff.initial"},
		{"backoff.max", kind + "    backoff: {max: 0}\n", "kinds.build.backoff.max"},
		{"backoff.max_retry_after", kind + "    backoff: {max_retry_after: 0ms}\n", "kinds.build.backoff.max_retry_after"},
		{"http timeout", "kinds:\n  build:\n    target: {http: {url: http://h/, timeout: 0s}}\n", "kinds.build.target.http.timeout"},
		{"exec timeout", "kinds:\n  deploy:\n    target: {exec: {command: [./d.sh], timeout: 0s}}\n", "kinds.deploy.target.exec.timeout"},
		{"max_payload_bytes", "max_payload_bytes: 0\n", "max_payload_bytes"},
		{"rescue_after", "rescue_after: 0s\n", "rescue_after"},
		{"shutdown_timeout", "shutdown_timeout: 0s\n", "shutdown_timeout"},
		{"request_timeout", "request_timeout: 0s\n", "request_timeout"},
		{"database.statement_timeout", "database: {statement_timeout: 0s}\n", "database.statement_timeout"},
		{"database.lock_timeout", "database: {lock_timeout: 0s}\n", "database.lock_timeout"},
		{"database.pooler empty", "database: {pooler: ''}\n", "database.pooler"},
		{"river.fetch_cooldown", "river: {fetch_cooldown: 0s}\n", "river.fetch_cooldown"},
		{"river.fetch_poll_interval", "river: {fetch_poll_interval: 0s}\n", "river.fetch_poll_interval"},
		{"rate_limit.window with requests", "rate_limit: {requests: 10, window: 0s}\n", "rate_limit.window"},
		{"log_level empty", "log_level: ''\n", "log_level"},
		{"notification max_attempts", notif + ", max_attempts: 0}\n", "notifications[0].max_attempts"},
		{"notification backoff.initial", notif + ", backoff: {initial: 0s}}\n", "notifications[0].backoff.initial"},
		{"notification timeout", notif + ", timeout: 0s}\n", "notifications[0].timeout"},
		{"notification format empty", notif + ", format: ''}\n", "notifications[0].format"},
		{"max_attempts through a merge key", "kinds:\n  other: &base\n    target: {http: {url: http://127.0.0.1:9000/other}}\n    max_attempts: 0\n" +
			"  build:\n    <<: *base\n", "kinds.build.max_attempts"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			yaml := tc.yaml
			if !strings.Contains(yaml, "kinds:") {
				yaml += kind
			}
			cfg, err := load(t, yaml, nil)
			if err == nil {
				t.Fatalf("loaded %+v, want an error naming %s", cfg, tc.key)
			}
			var ke *config.KeyError
			if !errors.As(err, &ke) || ke.Key != tc.key || !strings.HasPrefix(err.Error(), "invalid configuration: "+tc.key+": ") {
				t.Errorf("error %q, want a KeyError naming %s", err, tc.key)
			}
		})
	}
}

// TestExplicitZeroAllowed: the keys whose zero means something (off,
// keep forever) take an explicit zero, and a key left out or set to null
// gets its default.
func TestExplicitZeroAllowed(t *testing.T) {
	t.Parallel()
	cfg, err := load(t, `rate_limit: {requests: 0, window: 0s}
retention: {runs: 0s, interval: 0s}
kinds:
  build:
    target: {http: {url: http://127.0.0.1:9000/build}}
    quarantine_after: 0
    debounce: 0s
    max_attempts:
    concurrency: null
`, nil)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	k := cfg.Kinds["build"]
	if k.QuarantineAfter != 0 || k.DebounceDelay() != 0 || k.MaxAttempts != config.DefaultMaxAttempts || k.Concurrency != config.DefaultConcurrency ||
		k.Backoff.Initial.Std() != time.Second || k.Target.HTTP.Timeout.Std() <= 0 {
		t.Errorf("kind %+v", k)
	}
	if cfg.RateLimit.Requests != 0 || cfg.Retention.Runs.Std() != 0 || cfg.Retention.Interval.Std() != 0 ||
		cfg.MaxPayloadBytes != config.DefaultMaxPayloadBytes || cfg.ShutdownTimeout.Std() <= 0 || cfg.LogLevel != "info" {
		t.Errorf("config %+v", cfg)
	}
	// A configuration built in code sets no key: its zero values are
	// defaulted.
	c := &config.Config{Kinds: map[string]*config.Kind{"build": {Target: config.Target{HTTP: &config.HTTPTarget{URL: "http://127.0.0.1:9/"}}}}}
	if err := c.Finish(); err != nil || c.Kinds["build"].MaxAttempts != config.DefaultMaxAttempts || c.MaxPayloadBytes != config.DefaultMaxPayloadBytes {
		t.Errorf("built in code: %v, %+v", err, c.Kinds["build"])
	}
}

// TestExplicitZeroMerged: a key written in a mapping overrides one merged
// into it by a YAML merge key wherever it stands, a null one too (the key
// then gets its default), and a list of merged mappings counts as given.
func TestExplicitZeroMerged(t *testing.T) {
	t.Parallel()
	const kinds = `kinds:
  deploy: &ok {target: {http: {url: http://127.0.0.1:9000/deploy}}, max_attempts: 5}
  test: &two {target: {http: {url: http://127.0.0.1:9000/test}}, concurrency: 2}
`
	for _, tc := range []struct{ name, kind string }{
		{"null after the merge", "{<<: *ok, max_attempts: null}"},
		{"null before the merge", "{max_attempts: null, <<: *ok}"},
		{"null over a list of merges", "{<<: [*ok, *two], max_attempts: null}"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := load(t, kinds+"  build: "+tc.kind+"\n", nil)
			if err != nil {
				t.Fatalf("load: %v", err)
			}
			if got := cfg.Kinds["build"].MaxAttempts; got != config.DefaultMaxAttempts {
				t.Errorf("build max_attempts = %d, want the default %d", got, config.DefaultMaxAttempts)
			}
		})
	}
	_, err := load(t, kinds+"  build: {<<: *ok, max_attempts: 0}\n", nil)
	if err == nil || !strings.Contains(err.Error(), "kinds.build.max_attempts") {
		t.Fatalf("a written zero over a merged value: %v, want an error naming kinds.build.max_attempts", err)
	}
}
