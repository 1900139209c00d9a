package main

import (
	"errors"
	"io"
	"testing"

	"github.com/converge-run/converge/config"
	"github.com/converge-run/converge/test/testkit"
)

// TestSourceRuleStopsStartUp: a CEL expression that does not compile
// stops start-up with a *config.KeyError naming the rule, before any
// connection to the database.
func TestSourceRuleStopsStartUp(t *testing.T) {
	t.Parallel()
	cfg := testkit.ConfigFile(t, `kinds:
  build:
    target: {http: {url: http://127.0.0.1:9000/build}}
sources:
  github:
    type: github
    secret_env: GH_SECRET
    rules:
      - when: 'headers["x-github-event"] == "push" &&'
        kind: build
        resource: body.repository.full_name
        version: auto
`)
	env := map[string]string{"DATABASE_URL": "postgres://127.0.0.1:1/none", "GH_SECRET": "s"}
	err := run(t.Context(), []string{"api", "--config", cfg}, func(k string) string { return env[k] }, io.Discard, io.Discard)
	var ke *config.KeyError
	if !errors.As(err, &ke) || ke.Key != "sources.github.rules[0].when" {
		t.Fatalf("run = %v, want a *config.KeyError at sources.github.rules[0].when", err)
	}
}
