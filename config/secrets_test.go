package config_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/converge-run/converge/config"
)

// TestLoadSecretsPerProcess: each process reads only the secrets it uses.
// The API checks the sources' signatures (secret_env); the workers sign
// their target calls (signing_secret_env) and notifications (secret_env).
// A variable a process does not need may be unset; one it needs stops
// start-up naming its key.
func TestLoadSecretsPerProcess(t *testing.T) {
	t.Parallel()
	yaml := `database_url: postgres://127.0.0.1:5432/x
kinds:
  build:
    target: {http: {url: http://127.0.0.1:9000/build, signing_secret_env: SIGN}}
sources:
  github:
    type: github
    secret_env: HOOK
    rules: [{kind: build, resource: '"a"', version: '1'}]
notifications:
  - {url: http://127.0.0.1:9001/n, secret_env: NOTE, on: [dead_letter.created]}
`
	path := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	env := func(vars map[string]string) func(string) string { return func(k string) string { return vars[k] } }
	api, worker := config.Secrets{Sources: true}, config.Secrets{Calls: true}
	for _, x := range []struct {
		name string
		need config.Secrets
		vars map[string]string
		key  string // "" = loads
	}{
		{"api without the call secrets", api, map[string]string{"HOOK": "h"}, ""},
		{"api without the source secret", api, map[string]string{"SIGN": "s", "NOTE": "n"}, "sources.github.secret_env"},
		{"worker without the source secret", worker, map[string]string{"SIGN": "s", "NOTE": "n"}, ""},
		{"worker without the signing secret", worker, map[string]string{"HOOK": "h", "NOTE": "n"}, "kinds.build.target.http.signing_secret_env"},
		{"worker without the notification secret", worker, map[string]string{"HOOK": "h", "SIGN": "s"}, "notifications[0].secret_env"},
		{"serve needs all", config.Secrets{Sources: true, Calls: true}, map[string]string{"HOOK": "h", "SIGN": "s"}, "notifications[0].secret_env"},
	} {
		cfg, err := config.LoadSecrets(path, env(x.vars), x.need)
		var ke *config.KeyError
		switch {
		case x.key == "" && err != nil:
			t.Errorf("%s: %v, want it to load", x.name, err)
		case x.key != "" && (!errors.As(err, &ke) || ke.Key != x.key):
			t.Errorf("%s: %v, want a KeyError at %s", x.name, err, x.key)
		case x.key == "" && x.need.Sources && cfg.SourceDefs()[0].Secret != "h":
			t.Errorf("%s: the source's secret was not read", x.name)
		case x.key == "" && x.need.Calls && cfg.Kinds["build"].Target.HTTP.SigningSecret() != "s":
			t.Errorf("%s: the signing secret was not read", x.name)
		}
	}
}
