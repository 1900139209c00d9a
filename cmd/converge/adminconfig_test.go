package main

import (
	"strings"
	"testing"

	"github.com/converge-run/converge/test/pgtest"
	"github.com/converge-run/converge/test/testkit"
)

// TestAdminCommandsNeedNoSecrets: migrate, token and prune read and write
// the database only, so they run with a configuration whose sources,
// signed targets and notifications name secrets that are not set (a
// migration job holds no webhook secret), while a command that serves
// still stops naming the first missing one.
func TestAdminCommandsNeedNoSecrets(t *testing.T) {
	t.Parallel()
	cfg := testkit.ConfigFile(t, `kinds:
  build:
    target: {http: {url: http://127.0.0.1:9/build, signing_secret_env: CVG_TEST_UNSET_SIGNING}}
sources:
  github:
    type: github
    secret_env: CVG_TEST_UNSET_GITHUB
    rules:
      - when: 'true'
        kind: build
        resource: 'body.repository.full_name'
        version: auto
notifications:
  - {url: http://127.0.0.1:9/notify, secret_env: CVG_TEST_UNSET_NOTIFY, on: [dead_letter.created]}
`)
	vars := map[string]string{"DATABASE_URL": pgtest.URL(t)}
	for _, args := range [][]string{
		{"migrate", "status"}, {"token", "list"}, {"prune", "--dry-run"},
	} {
		stdout, stderr, err := secRun(t, vars, append(args, "--config", cfg)...)
		if err != nil {
			t.Errorf("converge %s with the secrets unset: %v\nstdout %s\nstderr %s", strings.Join(args, " "), err, stdout, stderr)
		}
	}
	vars["CONVERGE_LISTEN"] = "127.0.0.1:0"
	_, stderr, err := secRun(t, vars, "api", "--config", cfg)
	if err == nil || !strings.Contains(stderr, "sources.github.secret_env") {
		t.Errorf("converge api with the secrets unset: %v, stderr %q; want a stop naming sources.github.secret_env", err, stderr)
	}
}
