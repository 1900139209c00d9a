package main

import (
	"errors"
	"io"
	"strings"
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

// TestSourceFieldStopsStartUp: a mistake in a source's own fields (not in
// one of its rules) stops start-up naming sources.<name>.<field>, never a
// rule: its secret_env unset or missing, a Standard Webhooks secret that is
// not base64, its type and auth.
func TestSourceFieldStopsStartUp(t *testing.T) {
	t.Parallel()
	const kinds = "kinds:\n  deploy:\n    target: {http: {url: http://127.0.0.1:9000/deploy}}\n"
	const rules = "    rules:\n      - when: 'body.type == \"image.pushed\"'\n        kind: deploy\n        resource: '\"staging/\" + body.data.repository'\n        version: auto\n"
	for _, c := range []struct {
		name, source, secret, key, message string
	}{
		{"secret not base64", "    type: cloudevents\n    secret_env: REGISTRY_SECRET\n", "short", "sources.registry.secret_env", "base64"},
		{"whsec_ secret not base64", "    type: webhook\n    secret_env: REGISTRY_SECRET\n", "whsec_!!", "sources.registry.secret_env", "base64"},
		{"secret_env unset", "    type: cloudevents\n    secret_env: REGISTRY_SECRET\n", "", "sources.registry.secret_env", "REGISTRY_SECRET is not set"},
		{"no secret_env", "    type: cloudevents\n", "", "sources.registry.secret_env", "is required"},
		{"no type", "    secret_env: REGISTRY_SECRET\n", "c2VjcmV0", "sources.registry.type", "is required"},
		{"unknown auth", "    type: github\n    auth: magic\n    secret_env: REGISTRY_SECRET\n", "s", "sources.registry.auth", "unknown auth"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cfg := testkit.ConfigFile(t, kinds+"sources:\n  registry:\n"+c.source+rules)
			env := map[string]string{"DATABASE_URL": "postgres://127.0.0.1:1/none", "REGISTRY_SECRET": c.secret}
			err := run(t.Context(), []string{"api", "--config", cfg}, func(k string) string { return env[k] }, io.Discard, io.Discard)
			var ke *config.KeyError
			if !errors.As(err, &ke) || ke.Key != c.key || !strings.Contains(err.Error(), c.key+": ") || !strings.Contains(ke.Message, c.message) ||
				strings.Contains(err.Error(), "rules[") {
				t.Fatalf("run = %v, want a *config.KeyError at %s saying %q", err, c.key, c.message)
			}
		})
	}
}
