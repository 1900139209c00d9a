package converge_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/converge-run/converge"
)

func release() map[string]*converge.WorkflowStep {
	return map[string]*converge.WorkflowStep{
		"build":   {Kind: "build"},
		"staging": {Kind: "deploy", Resource: "staging/{resource}", Needs: []string{"build"}},
		"canary":  {Kind: "deploy", Resource: "canary/{resource}", Needs: []string{"build"}},
		"prod":    {Kind: "deploy", Resource: "prod/{resource}", Needs: []string{"staging", "canary"}, Approval: true},
	}
}

func TestNewWorkflowOrdersSteps(t *testing.T) {
	t.Parallel()
	w, err := converge.NewWorkflow("release", release())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range w.Steps {
		names = append(names, s.Name)
	}
	if got, want := strings.Join(names, ","), "build,canary,staging,prod"; got != want {
		t.Fatalf("order = %s, want %s", got, want)
	}
	if roots := w.Roots(); len(roots) != 1 || roots[0].Name != "build" {
		t.Fatalf("roots = %v", roots)
	}
	if d := w.Dependents("build"); len(d) != 2 || d[0].Name != "canary" || d[1].Name != "staging" {
		t.Fatalf("dependents of build = %v", d)
	}
	if b := w.Behind("staging"); len(b) != 1 || b[0].Name != "prod" {
		t.Fatalf("behind staging = %v", b)
	}
	if b := w.Behind("build"); len(b) != 3 {
		t.Fatalf("behind build = %d steps, want 3", len(b))
	}
	got, err := w.Step("build").StepResource("app/web")
	if err != nil || got != "app/web" {
		t.Fatalf("build resource = %q, %v", got, err)
	}
	got, err = w.Step("prod").StepResource("app/web")
	if err != nil || got != "prod/app/web" {
		t.Fatalf("prod resource = %q, %v", got, err)
	}
	if _, err := w.Step("prod").StepResource(strings.Repeat("a", 196)); err == nil {
		t.Fatal("a resolved key over 200 characters was accepted")
	}
}

// TestNewWorkflowInOrder: steps that need none of each other keep the
// order they were written in; an order that does not name every step once
// is name order; errors name the same step whatever the order.
func TestNewWorkflowInOrder(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		order []string
		want  string
	}{
		{[]string{"build", "staging", "canary", "prod"}, "build,staging,canary,prod"},
		{[]string{"prod", "staging", "canary", "build"}, "build,staging,canary,prod"},
		{[]string{"canary", "prod", "build", "staging"}, "build,canary,staging,prod"},
		{[]string{"build", "staging", "prod"}, "build,canary,staging,prod"},
		{[]string{"build", "staging", "canary", "prod", "prod"}, "build,canary,staging,prod"},
		{nil, "build,canary,staging,prod"},
	} {
		w, err := converge.NewWorkflowInOrder("release", tc.order, release())
		if err != nil {
			t.Fatalf("%v: %v", tc.order, err)
		}
		var names []string
		for _, s := range w.Steps {
			names = append(names, s.Name)
		}
		if got := strings.Join(names, ","); got != tc.want {
			t.Errorf("%v: order %s, want %s", tc.order, got, tc.want)
		}
	}
	cycle := func() map[string]*converge.WorkflowStep {
		return map[string]*converge.WorkflowStep{"a": {Kind: "k", Needs: []string{"b"}}, "b": {Kind: "k", Needs: []string{"a"}}}
	}
	_, byName := converge.NewWorkflow("w", cycle())
	_, written := converge.NewWorkflowInOrder("w", []string{"b", "a"}, cycle())
	if byName == nil || written == nil || byName.Error() != written.Error() {
		t.Errorf("a cycle: %v in name order, %v as written; want the same error", byName, written)
	}
}

func TestNewWorkflowRefusesBadDAGs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		steps   map[string]*converge.WorkflowStep
		wantKey string
		wantMsg string
	}{
		{"empty", map[string]*converge.WorkflowStep{}, "steps", "at least one"},
		{"unknown need", map[string]*converge.WorkflowStep{
			"a": {Kind: "build", Needs: []string{"nope"}},
		}, "steps.a.needs", `unknown step "nope"`},
		{"self cycle", map[string]*converge.WorkflowStep{
			"a": {Kind: "build", Needs: []string{"a"}},
		}, "steps.a.needs", "cycle: a -> a"},
		{"long cycle", map[string]*converge.WorkflowStep{
			"root": {Kind: "build"},
			"a":    {Kind: "deploy", Resource: "a/{resource}", Needs: []string{"root", "c"}},
			"b":    {Kind: "deploy", Resource: "b/{resource}", Needs: []string{"a"}},
			"c":    {Kind: "deploy", Resource: "c/{resource}", Needs: []string{"b"}},
		}, "steps.a.needs", "cycle: a -> c -> b -> a"},
		{"need twice", map[string]*converge.WorkflowStep{
			"a": {Kind: "build"},
			"b": {Kind: "deploy", Needs: []string{"a", "a"}},
		}, "steps.b.needs", "twice"},
		{"same stream", map[string]*converge.WorkflowStep{
			"a": {Kind: "deploy", Resource: "x/{resource}"},
			"b": {Kind: "deploy", Resource: "x/{resource}", Needs: []string{"a"}},
		}, "steps.b.resource", `same stream as step "a"`},
		{"same stream default", map[string]*converge.WorkflowStep{
			"a": {Kind: "build"},
			"b": {Kind: "build", Resource: "{resource}"},
		}, "steps.b.resource", "same stream"},
		{"same stream for one resource", map[string]*converge.WorkflowStep{
			"a": {Kind: "deploy", Resource: "x/{resource}"},
			"b": {Kind: "deploy", Resource: "x/y", Needs: []string{"a"}},
		}, "steps.b.resource", "same stream"},
		{"same stream for one resource, constant first", map[string]*converge.WorkflowStep{
			"a": {Kind: "deploy", Resource: "prod/web-eu"},
			"b": {Kind: "deploy", Resource: "prod/{resource}-eu", Needs: []string{"a"}},
		}, "steps.b.resource", "same stream"},
		{"bad placeholder", map[string]*converge.WorkflowStep{
			"a": {Kind: "build", Resource: "{name}/x"},
		}, "steps.a.resource", "only placeholder"},
		{"bad character", map[string]*converge.WorkflowStep{
			"a": {Kind: "build", Resource: "prod {resource}"},
		}, "steps.a.resource", "may contain only"},
		{"bad start", map[string]*converge.WorkflowStep{
			"a": {Kind: "build", Resource: "/{resource}"},
		}, "steps.a.resource", "start with a letter or digit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := converge.NewWorkflow("w", tc.steps)
			var we *converge.WorkflowError
			if !errors.As(err, &we) {
				t.Fatalf("err = %v, want a *WorkflowError", err)
			}
			if we.Key() != tc.wantKey || !strings.Contains(err.Error(), tc.wantMsg) {
				t.Fatalf("err = %q (key %s), want key %s and %q", err, we.Key(), tc.wantKey, tc.wantMsg)
			}
		})
	}
}

func TestNewWorkflowAllowsSameKindOtherStreams(t *testing.T) {
	t.Parallel()
	_, err := converge.NewWorkflow("w", map[string]*converge.WorkflowStep{
		"a": {Kind: "deploy", Resource: "eu/{resource}"},
		"b": {Kind: "deploy", Resource: "us/{resource}", Needs: []string{"a"}},
		"c": {Kind: "build", Resource: "eu/{resource}", Needs: []string{"a"}},
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestWorkflowStepResources: a workflow run's resource resolves every
// step's stream; two steps of one kind whose templates start-up could not
// show to meet ("p/{resource}" and "{resource}/{resource}" meet for p
// only) are refused for the resource that makes them one stream, naming
// both; a constant key no template can reach is not a collision.
func TestWorkflowStepResources(t *testing.T) {
	t.Parallel()
	w, err := converge.NewWorkflow("w", map[string]*converge.WorkflowStep{
		"a": {Kind: "deploy", Resource: "p/{resource}"},
		"b": {Kind: "deploy", Resource: "{resource}/{resource}", Needs: []string{"a"}},
		"c": {Kind: "deploy", Resource: "q/-", Needs: []string{"a"}}, // q/{resource} for "-", not a valid resource
		"d": {Kind: "deploy", Resource: "q/{resource}", Needs: []string{"a"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err := w.StepResources("app")
	if err != nil || got["a"] != "p/app" || got["b"] != "app/app" || got["c"] != "q/-" || got["d"] != "q/app" {
		t.Fatalf("StepResources(app) = %v, %v", got, err)
	}
	if _, err := w.StepResources("p"); err == nil || !strings.Contains(err.Error(), "steps a and b both resolve to the stream deploy p/p") {
		t.Fatalf("StepResources(p) = %v, want steps a and b on one stream", err)
	}
}

func TestStepPayload(t *testing.T) {
	t.Parallel()
	got, err := converge.StepPayload(json.RawMessage(`{"sha":"abc"}`), map[string]json.RawMessage{
		"build": json.RawMessage(`{"image":"web:1"}`),
		"lint":  nil,
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"payload":{"sha":"abc"},"needs":{"build":{"image":"web:1"},"lint":null}}`; string(got) != want {
		t.Fatalf("payload = %s, want %s", got, want)
	}
	got, err = converge.StepPayload(nil, nil)
	if err != nil || string(got) != `{"payload":{},"needs":{}}` {
		t.Fatalf("root payload = %s, %v", got, err)
	}
}
