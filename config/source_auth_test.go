package config_test

import (
	"errors"
	"testing"

	"github.com/converge-run/converge/config"
)

// TestLoadSourceAuth: a cloudevents source with auth: token needs no
// secret_env and is marked for bearer tokens; token is refused for other
// types, and an unknown auth names its key.
func TestLoadSourceAuth(t *testing.T) {
	t.Parallel()
	cfg, err := load(t, sourceKinds+"sources:\n  registry:\n    type: cloudevents\n    auth: token\n    rules: [{kind: build, resource: '\"a\"', version: '1'}]\n", nil)
	if err != nil {
		t.Fatal(err)
	}
	if defs := cfg.SourceDefs(); len(defs) != 1 || !defs[0].BearerToken {
		t.Errorf("defs = %+v, want the registry source authenticated by a bearer token", defs)
	}
	cfg, err = load(t, sourceKinds+"sources:\n  registry:\n    type: cloudevents\n    secret_env: S\n", map[string]string{"S": "whsec_x"})
	if err != nil {
		t.Fatal(err)
	}
	if defs := cfg.SourceDefs(); defs[0].BearerToken || cfg.Sources["registry"].Auth != config.SourceAuthSignature {
		t.Errorf("the default auth is not signature: %+v", defs[0])
	}
	for name, c := range map[string]struct{ yaml, key string }{
		"token for github":         {sourceKinds + "sources:\n  gh:\n    type: github\n    auth: token\n", "sources.gh.auth"},
		"unknown auth":             {sourceKinds + "sources:\n  r:\n    type: cloudevents\n    auth: mtls\n", "sources.r.auth"},
		"signature, no secret_env": {sourceKinds + "sources:\n  r:\n    type: cloudevents\n    auth: signature\n", "sources.r.secret_env"},
	} {
		_, err := load(t, c.yaml, nil)
		var ke *config.KeyError
		if !errors.As(err, &ke) || ke.Key != c.key {
			t.Errorf("%s: err = %v, want a KeyError at %s", name, err, c.key)
		}
	}
}
