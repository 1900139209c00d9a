package config_test

import (
	"errors"
	"testing"

	"github.com/converge-run/converge/config"
	"github.com/converge-run/converge/source"
)

const sourceKinds = `kinds:
  build:
    target: {http: {url: http://127.0.0.1:9000/build}}
`

// TestLoadSources: a source's secret comes from its secret_env; a broken
// source is a *KeyError naming its key, a broken CEL expression too once
// the source package compiles it (config.Keyed).
func TestLoadSources(t *testing.T) {
	t.Parallel()
	good := sourceKinds + `sources:
  github:
    type: github
    secret_env: GH_SECRET
    rules:
      - when: 'headers["x-github-event"] == "push" && body.ref == "refs/heads/main"'
        kind: build
        resource: body.repository.full_name
        version: auto
        payload: '{"sha": body.after}'
`
	cfg, err := load(t, good, map[string]string{"GH_SECRET": "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	defs := cfg.SourceDefs()
	if len(defs) != 1 || defs[0].Secret != "s3cret" || defs[0].Rules[0].Version != "auto" {
		t.Errorf("defs = %+v", defs)
	}
	if _, err := source.Compile(defs); err != nil {
		t.Errorf("compile: %v", err)
	}

	cases := []struct {
		name, yaml string
		env        map[string]string
		key        string
	}{
		{"secret unset", good, nil, "sources.github.secret_env"},
		{"unknown type", sourceKinds + "sources:\n  x:\n    type: gitlab\n    secret_env: S\n", map[string]string{"S": "s"}, "sources.x.type"},
		{"unknown kind", sourceKinds + "sources:\n  x:\n    type: github\n    secret_env: S\n    rules: [{kind: nope, resource: '\"a\"', version: '1'}]\n",
			map[string]string{"S": "s"}, "sources.x.rules[0].kind"},
		{"unknown workflow", sourceKinds + "sources:\n  x:\n    type: github\n    secret_env: S\n    rules: [{workflow: nope, resource: '\"a\"', version: '1'}]\n",
			map[string]string{"S": "s"}, "sources.x.rules[0].workflow"},
		{"both", sourceKinds + "sources:\n  x:\n    type: github\n    secret_env: S\n    rules: [{kind: build, workflow: w, resource: '\"a\"', version: '1'}]\n",
			map[string]string{"S": "s"}, "sources.x.rules[0]"},
		{"no version", sourceKinds + "sources:\n  x:\n    type: github\n    secret_env: S\n    rules: [{kind: build, resource: '\"a\"'}]\n",
			map[string]string{"S": "s"}, "sources.x.rules[0].version"},
	}
	for _, c := range cases {
		_, err := load(t, c.yaml, c.env)
		var ke *config.KeyError
		if !errors.As(err, &ke) || ke.Key != c.key {
			t.Errorf("%s: err = %v, want a KeyError at %s", c.name, err, c.key)
		}
	}

	broken := sourceKinds + "sources:\n  github:\n    type: github\n    secret_env: S\n    rules: [{when: 'body.ref ==', kind: build, resource: '\"a\"', version: '1'}]\n"
	cfg, err = load(t, broken, map[string]string{"S": "s"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = source.Compile(cfg.SourceDefs())
	var ke *config.KeyError
	if !errors.As(config.Keyed(err), &ke) || ke.Key != "sources.github.rules[0].when" {
		t.Errorf("broken when: %v, want a KeyError at sources.github.rules[0].when", config.Keyed(err))
	}
}
