package source_test

import (
	"errors"
	"testing"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/config"
	"github.com/converge-run/converge/source"
)

// TestCompileNamesTheRule: an expression that does not parse, names an
// unknown variable or has the wrong type stops Compile naming its key,
// which config.Keyed turns into a *config.KeyError.
func TestCompileNamesTheRule(t *testing.T) {
	t.Parallel()
	good := converge.SourceRule{When: `headers["x-github-event"] == "push"`, Kind: "build", Resource: `body.repository.full_name`, Version: "auto"}
	cases := []struct {
		name string
		rule converge.SourceRule
		key  string
	}{
		{"syntax", converge.SourceRule{When: `body.ref ==`, Kind: "build", Resource: `"a"`, Version: "1"}, "sources.github.rules[1].when"},
		{"unknown variable", converge.SourceRule{Kind: "build", Resource: `bdy.name`, Version: "1"}, "sources.github.rules[1].resource"},
		{"when not bool", converge.SourceRule{When: `"yes"`, Kind: "build", Resource: `"a"`, Version: "1"}, "sources.github.rules[1].when"},
		{"resource not string", converge.SourceRule{Kind: "build", Resource: `42`, Version: "1"}, "sources.github.rules[1].resource"},
		{"version not number", converge.SourceRule{Kind: "build", Resource: `"a"`, Version: `"one"`}, "sources.github.rules[1].version"},
		{"payload not map", converge.SourceRule{Kind: "build", Resource: `"a"`, Version: "1", Payload: `[1]`}, "sources.github.rules[1].payload"},
		{"headers typed", converge.SourceRule{When: `headers["a"] == 1`, Kind: "build", Resource: `"a"`, Version: "1"}, "sources.github.rules[1].when"},
	}
	for _, c := range cases {
		_, err := source.Compile([]converge.SourceDef{{Name: "github", Type: converge.SourceGitHub, Secret: "s",
			Rules: []converge.SourceRule{good, c.rule}}})
		var re *source.RuleError
		if !errors.As(err, &re) || re.Key() != c.key {
			t.Errorf("%s: err = %v, want a RuleError at %s", c.name, err, c.key)
			continue
		}
		var ke *config.KeyError
		if !errors.As(config.Keyed(err), &ke) || ke.Key != c.key {
			t.Errorf("%s: config.Keyed = %v, want a *config.KeyError at %s", c.name, config.Keyed(err), c.key)
		}
	}
	if _, err := source.Compile([]converge.SourceDef{{Name: "github", Type: converge.SourceGitHub, Secret: "s",
		Rules: []converge.SourceRule{good, {Kind: "deploy", Resource: `"staging/" + body.data.repository`, Version: `int(body.data.build_number)`,
			Payload: `{"sha": body.after}`}}}}); err != nil {
		t.Errorf("good rules: %v", err)
	}
}
