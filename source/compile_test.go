package source_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/source"
)

// TestCompileSourceFieldKey: a source-level mistake (a Standard Webhooks
// secret that is not base64) is a *RuleError keyed sources.<name>.<field>,
// while a rule's is keyed sources.<name>.rules[N].<field>.
func TestCompileSourceFieldKey(t *testing.T) {
	t.Parallel()
	rule := converge.SourceRule{Kind: "deploy", Resource: `"a"`, Version: "1"}
	for _, typ := range []string{converge.SourceCloudEvents, converge.SourceWebhook} {
		_, err := source.Compile([]converge.SourceDef{{Name: "registry", Type: typ, Secret: "short", Rules: []converge.SourceRule{rule}}})
		var re *source.RuleError
		if !errors.As(err, &re) || re.Key() != "sources.registry.secret_env" || !strings.HasPrefix(err.Error(), "sources.registry.secret_env: ") ||
			!strings.Contains(re.Message(), "base64") {
			t.Errorf("%s with a secret not base64: %v, want a *RuleError at sources.registry.secret_env", typ, err)
		}
	}
	broken := rule
	broken.Resource = "body.("
	_, err := source.Compile([]converge.SourceDef{{Name: "registry", Type: converge.SourceCloudEvents, Secret: "c2VjcmV0", Rules: []converge.SourceRule{rule, broken}}})
	var re *source.RuleError
	if !errors.As(err, &re) || re.Key() != "sources.registry.rules[1].resource" {
		t.Errorf("a broken rule: %v, want a *RuleError at sources.registry.rules[1].resource", err)
	}
}
