package ui

import (
	"testing"

	"github.com/converge-run/converge"
)

func TestLayoutGraphColumnsByDepth(t *testing.T) {
	t.Parallel()
	// Steps come in topological order, as the store gives them.
	steps := []*converge.WorkflowRunStep{
		{Name: "build", Status: "succeeded"},
		{Name: "canary", Needs: []string{"build"}, Status: "running"},
		{Name: "staging", Needs: []string{"build"}, Status: "queued"},
		{Name: "notify", Needs: []string{"build"}, Status: "queued"},
		{Name: "prod", Needs: []string{"staging", "canary"}, Status: "pending"},
		{Name: "smoke", Needs: []string{"prod", "build"}, Status: "pending"},
	}
	g := layoutGraph(steps)
	depth := map[string]int{}
	y := map[string]int{}
	for _, n := range g.Nodes {
		depth[n.Step.Name], y[n.Step.Name] = n.Depth, n.Y
	}
	for name, want := range map[string]int{"build": 0, "canary": 1, "staging": 1, "notify": 1, "prod": 2, "smoke": 3} {
		if depth[name] != want {
			t.Errorf("depth of %s = %d, want %d", name, depth[name], want)
		}
	}
	if len(g.Edges) != 7 {
		t.Fatalf("%d edges, want 7", len(g.Edges))
	}
	// The one-step columns are centred on the three-step column.
	if y["build"] != y["staging"] || y["prod"] != y["staging"] {
		t.Errorf("build y %d, prod y %d, want the middle row's %d", y["build"], y["prod"], y["staging"])
	}
	if g.Width != 2*graphPadding+4*graphNodeW+3*graphColGap || g.Height != 2*graphPadding+3*graphNodeH+2*graphRowGap {
		t.Errorf("size %dx%d", g.Width, g.Height)
	}
	done := 0
	for _, e := range g.Edges {
		if e.Done {
			done++
		}
	}
	if done != 4 { // build's four lines
		t.Errorf("%d done edges, want 4", done)
	}
}
