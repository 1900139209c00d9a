package config_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/config"
)

const workflowKinds = `kinds:
  build:  {target: {http: {url: http://127.0.0.1:9000/build}}}
  deploy: {target: {http: {url: http://127.0.0.1:9000/deploy}}}
`

func TestLoadWorkflows(t *testing.T) {
	t.Parallel()
	cfg, err := load(t, workflowKinds+`workflows:
  release:
    steps:
      build:   {kind: build}
      staging: {kind: deploy, resource: "staging/{resource}", needs: [build]}
      canary:  {kind: deploy, resource: "canary/{resource}",  needs: [build]}
      prod:    {kind: deploy, resource: "prod/{resource}",    needs: [staging, canary]}
`, nil)
	if err != nil {
		t.Fatal(err)
	}
	w := cfg.WorkflowDefs()["release"]
	if w == nil || len(w.Steps) != 4 || w.Steps[3].Name != "prod" {
		t.Fatalf("release = %+v", w)
	}
	if got := w.Step("build").Resource; got != "{resource}" {
		t.Fatalf("build's default resource = %q", got)
	}
	// Steps are listed as written where their needs allow (SPEC §10's
	// example: staging before canary), not in name order.
	if got := stepNames(w.Steps); got != "build,staging,canary,prod" {
		t.Errorf("release's steps = %s, want build,staging,canary,prod", got)
	}
}

// TestLoadWorkflowsStepOrder: the steps of a workflow come in a topological
// order that keeps the order they are written in where their needs allow,
// whatever that order (needs written before the step, after it, or through
// a merge key).
func TestLoadWorkflowsStepOrder(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ steps, want string }{
		{`
      prod:    {kind: deploy, resource: "prod/{resource}", needs: [staging, canary]}
      canary:  {kind: deploy, resource: "canary/{resource}", needs: [build]}
      staging: {kind: deploy, resource: "staging/{resource}", needs: [build]}
      build:   {kind: build}`, "build,canary,staging,prod"},
		{`
      alpha: {kind: deploy, needs: [zeta]}
      mid:   {kind: deploy, resource: "mid/{resource}"}
      zeta:  {kind: build}`, "mid,zeta,alpha"},
		{`
      zeta:  {kind: build}
      alpha: {kind: deploy, needs: [zeta]}
      mid:   {kind: deploy, resource: "mid/{resource}"}`, "zeta,alpha,mid"},
		{`
      <<: {zeta: {kind: build}}
      alpha: {kind: deploy}`, "zeta,alpha"},
	} {
		cfg, err := load(t, workflowKinds+"workflows:\n  w:\n    steps:"+tc.steps+"\n", nil)
		if err != nil {
			t.Fatalf("%s: %v", tc.steps, err)
		}
		if got := stepNames(cfg.WorkflowDefs()["w"].Steps); got != tc.want {
			t.Errorf("%s: steps %s, want %s", tc.steps, got, tc.want)
		}
	}
}

// stepNames is the steps' names, comma-separated.
func stepNames(steps []*converge.WorkflowStep) string {
	names := make([]string, len(steps))
	for i, s := range steps {
		names[i] = s.Name
	}
	return strings.Join(names, ",")
}

func TestLoadWorkflowsInvalid(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, yaml, key, msg string }{
		{"cycle", `workflows:
  w:
    steps:
      a: {kind: build, needs: [b]}
      b: {kind: deploy, needs: [a]}
`, "workflows.w.steps.a.needs", "cycle"},
		{"unknown need", `workflows:
  w:
    steps:
      a: {kind: build, needs: [nope]}
`, "workflows.w.steps.a.needs", "unknown step"},
		{"unknown kind", `workflows:
  w:
    steps:
      a: {kind: test}
`, "workflows.w.steps.a.kind", "unknown kind"},
		{"no kind", `workflows:
  w:
    steps:
      a: {resource: "x/{resource}"}
`, "workflows.w.steps.a.kind", "required"},
		{"bad template", `workflows:
  w:
    steps:
      a: {kind: build, resource: "{repo}"}
`, "workflows.w.steps.a.resource", "placeholder"},
		{"same stream", `workflows:
  w:
    steps:
      a: {kind: deploy, resource: "prod/{resource}"}
      b: {kind: deploy, resource: "prod/{resource}", needs: [a]}
`, "workflows.w.steps.b.resource", "same stream"},
		{"no steps", `workflows:
  w: {steps: {}}
`, "workflows.w.steps", "at least one"},
		{"bad name", `workflows:
  Release Train:
    steps: {a: {kind: build}}
`, "workflows.Release Train", "workflow name"},
		{"unknown step key", `workflows:
  w:
    steps:
      a: {kind: build, after: [b]}
`, "workflows.w.steps.a.after", "not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := load(t, workflowKinds+tc.yaml, nil)
			var ke *config.KeyError
			if !errors.As(err, &ke) {
				t.Fatalf("err = %v, want a *config.KeyError", err)
			}
			if ke.Key != tc.key || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("err = %q (key %q), want key %q and %q", err, ke.Key, tc.key, tc.msg)
			}
		})
	}
}

func TestLoadHeldWork(t *testing.T) {
	t.Parallel()
	cfg, err := load(t, `kinds:
  build:  {target: {http: {url: http://127.0.0.1:9000/build}}, quarantine_after: 3}
  deploy: {target: {http: {url: http://127.0.0.1:9000/deploy}}}
workflows:
  release:
    steps:
      build: {kind: build}
      prod:  {kind: deploy, resource: "prod/{resource}", needs: [build], approval: true}
`, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.WorkflowDefs()["release"].Step("prod").Approval {
		t.Error("prod step lost its approval")
	}
	p := cfg.KindPolicies()
	if p["build"].QuarantineAfter != 3 || p["deploy"].QuarantineAfter != 0 {
		t.Errorf("quarantine_after: build %d, deploy %d", p["build"].QuarantineAfter, p["deploy"].QuarantineAfter)
	}
	_, err = load(t, `kinds:
  build: {target: {http: {url: http://127.0.0.1:9000/build}}, quarantine_after: -1}
`, nil)
	var ke *config.KeyError
	if !errors.As(err, &ke) || !strings.Contains(ke.Error(), "kinds.build.quarantine_after") {
		t.Errorf("quarantine_after -1: %v", err)
	}
}
