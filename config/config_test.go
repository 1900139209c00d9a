package config_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/config"
)

// load writes yaml to a file and loads it with env as the environment.
func load(t *testing.T, yaml string, env map[string]string) (*config.Config, error) {
	t.Helper()
	path := ""
	if yaml != "" {
		// Not t.TempDir: its name holds the test's, which would
		// satisfy the checks of the error message.
		dir, err := os.MkdirTemp("", "cfg")
		if err != nil {
			t.Fatalf("temp dir: %v", err)
		}
		t.Cleanup(func() { _ = os.RemoveAll(dir) })
		path = filepath.Join(dir, "converge.yaml")
		if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
			t.Fatalf("write config: %v", err)
		}
	}
	return config.Load(path, func(k string) string { return env[k] })
}

func TestLoadInvalid(t *testing.T) {
	t.Parallel()
	const target = "    target: {http: {url: http://127.0.0.1:9000/build}}\n"
	cases := []struct {
		name, yaml string
		env        map[string]string
		key        string // named in the error
	}{
		{"max_attempts negative", "kinds:\n  build:\n" + target + "    max_attempts: -1\n", nil, "kinds.build.max_attempts"},
		{"max_attempts too many", "kinds:\n  build:\n" + target + "    max_attempts: 100000\n", nil, "kinds.build.max_attempts"},
		{"max_attempts not a number", "kinds:\n  build:\n" + target + "    max_attempts: many\n", nil, "kinds.build.max_attempts"},
		// yaml.v3 would cut these to integers without a word (2.5 read as 2).
		{"max_attempts with a fraction", "kinds:\n  build:\n" + target + "    max_attempts: 2.5\n", nil, "kinds.build.max_attempts"},
		{"concurrency with a fraction", "kinds:\n  build:\n" + target + "    concurrency: 1.9\n", nil, "kinds.build.concurrency"},
		{"quarantine_after with a fraction", "kinds:\n  build:\n" + target + "    quarantine_after: 0.5\n", nil, "kinds.build.quarantine_after"},
		{"max_payload_bytes with an exponent", "max_payload_bytes: 1e3\n", nil, "max_payload_bytes"},
		{"rate_limit requests with a fraction", "rate_limit: {requests: 10.5, window: 1s}\n", nil, "rate_limit.requests"},
		{"exit code with a fraction", "kinds:\n  deploy:\n    target: {exec: {command: [./d.sh], permanent_exit_codes: [2, 3.5]}}\n", nil, "kinds.deploy.target.exec.permanent_exit_codes[1]"},
		{"status with a fraction", "kinds:\n  x:\n    target: {http: {url: http://h/, permanent_statuses: [404.5]}}\n", nil, "kinds.x.target.http.permanent_statuses[0]"},
		{"fraction through a merge", "kinds:\n  build: &b\n" + target + "  deploy:\n    <<: *b\n    concurrency: 2.5\n", nil, "kinds.deploy.concurrency"},
		{"no target", "kinds:\n  build:\n    max_attempts: 3\n", nil, "kinds.build.target"},
		{"debounce negative", "kinds:\n  build:\n" + target + "    debounce: -1s\n", nil, "kinds.build.debounce"},
		{"debounce too long", "kinds:\n  build:\n" + target + "    debounce: 6s\n", nil, "kinds.build.debounce"},
		{"debounce not a duration", "kinds:\n  build:\n" + target + "    debounce: soon\n", nil, "kinds.build.debounce"},
		{"two targets", "kinds:\n  build:\n    target: {http: {url: http://x/}, exec: {command: [true]}}\n", nil, "kinds.build.target"},
		{"relative url", "kinds:\n  x:\n    target: {http: {url: /build}}\n", nil, "kinds.x.target.http.url"},
		{"ftp url", "kinds:\n  x:\n    target: {http: {url: ftp://host/build}}\n", nil, "kinds.x.target.http.url"},
		{"empty url", "kinds:\n  x:\n    target: {http: {url: ''}}\n", nil, "kinds.x.target.http.url"},
		{"http timeout negative", "kinds:\n  x:\n    target: {http: {url: http://h/, timeout: -1s}}\n", nil, "kinds.x.target.http.timeout"},
		{"bad status override", "kinds:\n  x:\n    target: {http: {url: http://h/, transient_statuses: [1000]}}\n", nil, "kinds.x.target.http.transient_statuses"},
		{"exec without command", "kinds:\n  deploy:\n    target: {exec: {command: []}}\n", nil, "kinds.deploy.target.exec.command"},
		{"exec bad exit code", "kinds:\n  deploy:\n    target: {exec: {command: [./d.sh], permanent_exit_codes: [0]}}\n", nil, "kinds.deploy.target.exec.permanent_exit_codes"},
		{"backoff max below initial", "kinds:\n  build:\n" + target + "    backoff: {initial: 2s, max: 1s}\n", nil, "kinds.build.backoff.max"},
		{"backoff initial too small", "kinds:\n  build:\n" + target + "    backoff: {initial: 1us}\n", nil, "kinds.build.backoff.initial"},
		{"backoff max_retry_after too small", "kinds:\n  build:\n" + target + "    backoff: {max_retry_after: 1us}\n", nil, "kinds.build.backoff.max_retry_after"},
		{"backoff bad duration", "kinds:\n  build:\n" + target + "    backoff: {initial: soon}\n", nil, "kinds.build.backoff.initial"},
		{"concurrency negative", "kinds:\n  build:\n" + target + "    concurrency: -2\n", nil, "kinds.build.concurrency"},
		{"bad kind name", "kinds:\n  Build Things:\n" + target, nil, "kinds.Build Things"},
		{"empty kind", "kinds:\n  build:\n", nil, "kinds.build"},
		{"unknown top-level key", "listen: 127.0.0.1:8080\nlisten_port: 80\n", nil, "listen_port"},
		{"unknown kind key", "kinds:\n  build:\n" + target + "    retries: 3\n", nil, "kinds.build.retries"},
		{"unknown target key", "kinds:\n  build:\n    target: {http: {url: http://h/, method: PUT}}\n", nil, "kinds.build.target.http.method"},
		{"rescue_after bad duration", "rescue_after: 5 minutes\n", nil, "rescue_after"},
		{"rescue_after too short", "rescue_after: 1ms\n", nil, "rescue_after"},
		{"shutdown_timeout bad duration", "shutdown_timeout: forever\n", nil, "shutdown_timeout"},
		{"http timeout bad duration", "kinds:\n  x:\n    target: {http: {url: http://h/, timeout: 3 seconds}}\n", nil, "kinds.x.target.http.timeout"},
		{"max_payload_bytes negative", "max_payload_bytes: -5\n", nil, "max_payload_bytes"},
		{"log_level", "log_level: loud\n", nil, "log_level"},
		{"database_url in the file", "database_url: mysql://db/converge\n", nil, "database_url"},
		{"database_url in the environment", "", map[string]string{"DATABASE_URL": "not a url"}, "database_url"},
		{"fetch poll below cooldown", "river: {fetch_cooldown: 100ms, fetch_poll_interval: 10ms}\n", nil, "river.fetch_poll_interval"},
		{"not yaml", "kinds: [unclosed\n", nil, "line"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := load(t, tc.yaml, tc.env)
			if err == nil {
				t.Fatalf("loaded %+v, want an error naming %s", cfg, tc.key)
			}
			if !strings.Contains(err.Error(), tc.key) {
				t.Errorf("error %q does not name %q", err, tc.key)
			}
			var ke *config.KeyError
			if errors.As(err, &ke) && ke.Key != tc.key && !strings.HasPrefix(ke.Key, tc.key) {
				t.Errorf("KeyError.Key = %q, want %q", ke.Key, tc.key)
			}
		})
	}
}

func TestLoadDefaults(t *testing.T) {
	t.Parallel()
	cfg, err := load(t, "", map[string]string{"DATABASE_URL": "postgres://u@127.0.0.1:5432/converge"})
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	if cfg.Listen != "127.0.0.1:8080" || cfg.MaxPayloadBytes != 262144 || cfg.RescueAfter.Std() != 2*time.Minute ||
		cfg.DatabaseURL != "postgres://u@127.0.0.1:5432/converge" || cfg.AdminToken != "" || cfg.LogLevel != "info" {
		t.Errorf("defaults: %+v", cfg)
	}
	if got := cfg.KindNames(); len(got) != 2 || got[0] != "build" || got[1] != "deploy" {
		t.Fatalf("kinds %v, want build and deploy", got)
	}
	for _, name := range cfg.KindNames() {
		k := cfg.Kinds[name]
		if k.MaxAttempts != 10 || k.Backoff.Initial.Std() != time.Second || k.Backoff.Max.Std() != 10*time.Minute ||
			k.Concurrency < 1 || k.Target.HTTP == nil || k.Target.HTTP.Timeout.Std() <= 0 || k.TargetTimeout() != k.Target.HTTP.Timeout.Std() ||
			k.DebounceDelay() != 200*time.Millisecond {
			t.Errorf("kind %s: %+v (target %+v)", name, k, k.Target.HTTP)
		}
	}
	if cfg.River.FetchCooldown <= 0 || cfg.River.FetchPollInterval < cfg.River.FetchCooldown {
		t.Errorf("river: %+v", cfg.River)
	}
}

func TestLoadFileAndEnvironment(t *testing.T) {
	t.Parallel()
	yaml := `
listen: 127.0.0.1:9999
database_url: postgres://file@127.0.0.1:5432/converge
max_payload_bytes: 1000
rescue_after: 30s
kinds:
  build:
    target:
      http: {url: http://127.0.0.1:9000/build, timeout: 250ms, transient_statuses: [409]}
    max_attempts: 8
    backoff: {initial: 50ms, max: 5m, max_retry_after: 2m}
    concurrency: 20
    debounce: 0s
  deploy:
    target:
      exec: {command: [./deploy.sh, --prod], timeout: 10m, permanent_exit_codes: [2]}
    max_attempts: 5
`
	cfg, err := load(t, yaml, map[string]string{
		"DATABASE_URL": "postgres://env@127.0.0.1:5432/converge", "CONVERGE_LISTEN": "127.0.0.1:7777",
		"CONVERGE_ADMIN_TOKEN": "s3cret",
	})
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	if cfg.Listen != "127.0.0.1:7777" || cfg.DatabaseURL != "postgres://env@127.0.0.1:5432/converge" || cfg.AdminToken != "s3cret" {
		t.Errorf("environment did not win: listen %s, database %s, token %q", cfg.Listen, cfg.DatabaseURL, cfg.AdminToken)
	}
	if cfg.MaxPayloadBytes != 1000 || cfg.RescueAfter.Std() != 30*time.Second {
		t.Errorf("file values: %+v", cfg)
	}
	b := cfg.Kinds["build"]
	if b.MaxAttempts != 8 || b.Concurrency != 20 || b.Backoff.Initial.Std() != 50*time.Millisecond || b.Backoff.Max.Std() != 5*time.Minute ||
		b.TargetTimeout() != 250*time.Millisecond || len(b.Target.HTTP.TransientStatuses) != 1 || b.DebounceDelay() != 0 {
		t.Errorf("build: %+v %+v", b, b.Target.HTTP)
	}
	if p := b.Backoff.Policy(); p.Initial != 50*time.Millisecond || p.Max != 5*time.Minute || p.MaxRetryAfter != 2*time.Minute {
		t.Errorf("policy %+v", p)
	}
	// The kind policies are the configured kinds', built once.
	policies := cfg.KindPolicies()
	want := converge.KindPolicy{Name: "build", MaxAttempts: 8, Backoff: converge.Backoff{Initial: 50 * time.Millisecond, Max: 5 * time.Minute, MaxRetryAfter: 2 * time.Minute},
		Concurrency: 20, Debounce: 0, Timeout: 250 * time.Millisecond}
	if got, ok := policies.Lookup("build"); !ok || got != want || len(policies) != 2 {
		t.Errorf("build policy %+v (%v), want %+v; %d policies", got, ok, want, len(policies))
	}
	if _, ok := policies.Lookup("nope"); ok {
		t.Error("an unconfigured kind has a policy")
	}
	d := cfg.Kinds["deploy"]
	if d.MaxAttempts != 5 || d.Backoff.Initial.Std() != time.Second || d.Backoff.Max.Std() != 10*time.Minute || d.Backoff.MaxRetryAfter.Std() != time.Hour ||
		d.Target.Exec == nil || d.TargetTimeout() != 10*time.Minute || d.Target.Exec.Command[1] != "--prod" {
		t.Errorf("deploy: %+v %+v", d, d.Target.Exec)
	}

	// A file without kinds keeps the default kinds; a missing file is an
	// error naming it.
	cfg, err = load(t, "listen: 127.0.0.1:1234\n", nil)
	if err != nil || len(cfg.Kinds) != 2 {
		t.Errorf("file without kinds: %v, %v", cfg, err)
	}
	if _, err := config.Load(filepath.Join(t.TempDir(), "missing.yaml"), func(string) string { return "" }); err == nil ||
		!strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("missing file: %v", err)
	}
}

// TestLoadEnvironmentErrors: a bad value from the environment stops
// start-up naming the key and the variable that set it; an admin token
// that could never be sent as a bearer token is refused naming
// CONVERGE_ADMIN_TOKEN.
func TestLoadEnvironmentErrors(t *testing.T) {
	t.Parallel()
	for _, x := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"DATABASE_URL": "mysql://x"}, "database_url: must be a postgres:// URL (set by DATABASE_URL)"},
		{map[string]string{"DATABASE_URL": "postgres://127.0.0.1/x", "CONVERGE_ADMIN_TOKEN": " spaced token "}, "CONVERGE_ADMIN_TOKEN: must be printable ASCII without spaces"},
		{map[string]string{"DATABASE_URL": "postgres://127.0.0.1/x", "CONVERGE_ADMIN_TOKEN": "line\nbreak"}, "CONVERGE_ADMIN_TOKEN: must be printable ASCII without spaces"},
	} {
		_, err := load(t, "", x.env)
		if err == nil || !strings.Contains(err.Error(), x.want) {
			t.Errorf("environment %q: %v, want %q", x.env, err, x.want)
		}
	}
}
