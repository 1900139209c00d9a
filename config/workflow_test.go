package config_test

import (
	"errors"
	"strings"
	"testing"

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
