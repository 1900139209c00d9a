package config_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/converge-run/converge/config"
)

// TestLoadNotifications: a receiver gets the kinds' retry defaults and
// its secret from secret_env; a signing target's secret comes from its
// signing_secret_env; every mistake is a *KeyError naming its key, and a
// receiver's URL (a chat webhook's credential) is never repeated.
func TestLoadNotifications(t *testing.T) {
	t.Parallel()
	good := sourceKinds + `notifications:
  - url: https://hooks.example.com/services/T0/B0/XYZ
    secret_env: NOTIFY_SECRET
    format: slack
    on: [dead_letter.created, run.held]
  - url: http://127.0.0.1:9999/notify
    on: [workflow_run.failed, stream.quarantined]
`
	cfg, err := load(t, good, map[string]string{"NOTIFY_SECRET": "whsec_abc"})
	if err != nil {
		t.Fatal(err)
	}
	n := cfg.Notifications
	if len(n) != 2 || n[0].Secret() != "whsec_abc" || n[0].Format != "slack" || n[1].Format != "standard" || n[1].Secret() != "" {
		t.Fatalf("notifications = %+v", n)
	}
	if n[1].MaxAttempts != config.DefaultMaxAttempts || n[1].Backoff.Initial.Std() != config.DefaultBackoffInitial ||
		n[1].Backoff.Max.Std() != config.DefaultBackoffMax || n[1].Timeout.Std() != config.DefaultNotificationTimeout {
		t.Errorf("defaults = %+v, want the kinds' retry defaults", n[1])
	}
	if got := cfg.DashboardURL(); got != "http://"+config.DefaultListen {
		t.Errorf("DashboardURL() = %q, want http://<listen>", got)
	}

	signed := `kinds:
  build:
    target: {http: {url: http://127.0.0.1:9000/build, signing_secret_env: BUILD_SECRET}}
`
	cfg, err = load(t, signed, map[string]string{"BUILD_SECRET": "whsec_xyz"})
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Kinds["build"].Target.HTTP.SigningSecret(); got != "whsec_xyz" {
		t.Errorf("signing secret %q", got)
	}

	cases := []struct {
		name, yaml string
		env        map[string]string
		key        string
	}{
		{"signing secret unset", signed, nil, "kinds.build.target.http.signing_secret_env"},
		{"secret unset", good, nil, "notifications[0].secret_env"},
		{"bad url", sourceKinds + "notifications:\n  - url: ftp://x/y\n    on: [run.held]\n", nil, "notifications[0].url"},
		{"bad format", sourceKinds + "notifications:\n  - url: http://x/y\n    format: teams\n    on: [run.held]\n", nil, "notifications[0].format"},
		{"no types", sourceKinds + "notifications:\n  - url: http://x/y\n", nil, "notifications[0].on"},
		{"unknown type", sourceKinds + "notifications:\n  - url: http://x/y\n    on: [run.held, run.failed]\n", nil, "notifications[0].on[1]"},
		{"bad attempts", sourceKinds + "notifications:\n  - url: http://x/y\n    on: [run.held]\n    max_attempts: -1\n", nil, "notifications[0].max_attempts"},
		{"bad backoff", sourceKinds + "notifications:\n  - url: http://x/y\n    on: [run.held]\n    backoff: {initial: 2s, max: 1s}\n", nil, "notifications[0].backoff.max"},
		{"bad base url", sourceKinds + "ui: {base_url: converge.example.com}\n", nil, "ui.base_url"},
		{"url of the wrong type", sourceKinds + "notifications:\n  - url: [https://hooks.example.com/services/SECRET]\n    on: [run.held]\n", nil, "notifications[0].url"},
	}
	for _, c := range cases {
		_, err := load(t, c.yaml, c.env)
		var ke *config.KeyError
		if !errors.As(err, &ke) || ke.Key != c.key {
			t.Errorf("%s: err = %v, want a KeyError at %s", c.name, err, c.key)
			continue
		}
		if strings.Contains(err.Error(), "SECRET") && !strings.Contains(c.name, "unset") {
			t.Errorf("%s: the error %q repeats the URL", c.name, err)
		}
	}

	base := sourceKinds + "ui: {base_url: \"https://converge.example.com/\"}\n"
	cfg, err = load(t, base, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.DashboardURL(); got != "https://converge.example.com" {
		t.Errorf("DashboardURL() = %q", got)
	}
}
