package ui

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/converge-run/converge"
)

// Sizes of the workflow run graph, in SVG user units (pixels).
const (
	graphNodeW   = 236
	graphNodeH   = 92
	graphColGap  = 76
	graphRowGap  = 22
	graphPadding = 12
)

// graph is the layout of a workflow run's steps: a column per depth in the
// DAG (a root is at depth 0, any other step one past its deepest need),
// drawn as inline SVG without JavaScript.
type graph struct {
	Width, Height int
	Nodes         []graphNode
	Edges         []graphEdge
}

// graphNode is one step's box.
type graphNode struct {
	Step  *converge.WorkflowRunStep
	Depth int
	X, Y  int
	// Subtitle is the step's kind and resource, cut to fit the box.
	Subtitle string
	// BadgeX is where the status badge starts, BadgeW its width.
	BadgeX, BadgeW int
	// Links are the step's event, run and dead letter, as far as it has
	// them, on the bottom line of the box.
	Links []graphLink
}

// graphLink is one link on a step's box.
type graphLink struct {
	Label, URL, TestID string
	X                  int
}

// graphEdge is a line from a need's right side to a step's left side.
type graphEdge struct {
	From, To string
	// Path is the SVG path of the line (a cubic curve).
	Path string
	// Done is set when the need has succeeded.
	Done bool
}

// R is the right edge of the node.
func (n graphNode) R() int { return n.X + graphNodeW }

// layoutGraph places steps (which come in a topological order, each after
// its needs) by depth, in their order within a column, columns centred on
// the tallest.
func layoutGraph(steps []*converge.WorkflowRunStep) *graph {
	depth := map[string]int{}
	byName := map[string]*converge.WorkflowRunStep{}
	var cols [][]*converge.WorkflowRunStep
	for _, s := range steps {
		byName[s.Name] = s
		d := 0
		for _, n := range s.Needs {
			if nd, ok := depth[n]; ok && nd+1 > d {
				d = nd + 1
			}
		}
		depth[s.Name] = d
		for len(cols) <= d {
			cols = append(cols, nil)
		}
		cols[d] = append(cols[d], s)
	}
	tallest := 0
	for _, c := range cols {
		tallest = max(tallest, len(c))
	}
	colH := func(n int) int { return n*graphNodeH + (n-1)*graphRowGap }
	g := &graph{
		Width:  2*graphPadding + len(cols)*graphNodeW + max(len(cols)-1, 0)*graphColGap,
		Height: 2*graphPadding + colH(max(tallest, 1)),
	}
	at := map[string]graphNode{}
	for d, c := range cols {
		top := graphPadding + (colH(tallest)-colH(len(c)))/2
		for i, s := range c {
			n := graphNode{Step: s, Depth: d, X: graphPadding + d*(graphNodeW+graphColGap), Y: top + i*(graphNodeH+graphRowGap)}
			n.BadgeW = badgeWidth(string(s.Status))
			n.BadgeX = n.X + graphNodeW - 10 - n.BadgeW
			n.Subtitle = truncate(34, s.Kind+" · "+s.Resource)
			n.Links = stepLinks(s, n.X+16)
			at[s.Name] = n
			g.Nodes = append(g.Nodes, n)
		}
	}
	for _, s := range steps {
		to := at[s.Name]
		// Lines into one step end apart, so that each arrow shows, in the
		// order of their needs' boxes from the top, so that none cross.
		needs := slices.Clone(s.Needs)
		slices.SortStableFunc(needs, func(a, b string) int { return at[a].Y - at[b].Y })
		for i, need := range needs {
			from, ok := at[need]
			if !ok {
				continue
			}
			x1, y1 := from.R(), from.Y+graphNodeH/2
			x2, y2 := to.X-6, to.Y+graphNodeH*(i+1)/(len(s.Needs)+1) // room for the arrow head
			mid := (x1 + x2) / 2
			g.Edges = append(g.Edges, graphEdge{From: need, To: s.Name,
				Path: fmt.Sprintf("M%d %d C%d %d %d %d %d %d", x1, y1, mid, y1, mid, y2, x2, y2),
				Done: byName[need].Status == converge.StepStatus(converge.RunSucceeded)})
		}
	}
	return g
}

// badgeWidth is roughly how wide a status badge with text s is at 11px.
func badgeWidth(s string) int { return 14 + 7*len(s) }

// progress is "succeeded/total" of a workflow run's steps.
func progress(w *converge.WorkflowRun) string {
	n := 0
	for _, s := range w.Steps {
		if s.Status == converge.StepStatus(converge.RunSucceeded) {
			n++
		}
	}
	return strconv.Itoa(n) + "/" + strconv.Itoa(len(w.Steps))
}

// stepLinks are the links of a step's box, laid out from x.
func stepLinks(s *converge.WorkflowRunStep, x int) []graphLink {
	var out []graphLink
	add := func(label, url, testID string) {
		out = append(out, graphLink{Label: label, URL: url, TestID: testID, X: x})
		x += 7*len([]rune(label)) + 16
	}
	if s.EventID != nil {
		add("event", "/ui/events/"+s.EventID.String(), "step-event")
		if s.RunID != nil {
			add("run", "/ui/events/"+s.EventID.String()+"#run-"+s.RunID.String(), "step-run")
		}
	}
	if s.DeadLetterID != nil {
		add("dead letter", "/ui/dead-letters/"+s.DeadLetterID.String(), "step-dead-letter")
	}
	return out
}
