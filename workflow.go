package converge

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
)

// WorkflowRunStatus is the state of a workflow run. Succeeded, superseded
// and cancelled are final; a failed workflow run is final once its
// FinishedAt is set (while the failed step's dead letter is open it may
// still resume).
type WorkflowRunStatus string

// Workflow run statuses.
const (
	WorkflowRunning    WorkflowRunStatus = "running"
	WorkflowWaiting    WorkflowRunStatus = "waiting"
	WorkflowSucceeded  WorkflowRunStatus = "succeeded"
	WorkflowFailed     WorkflowRunStatus = "failed"
	WorkflowSuperseded WorkflowRunStatus = "superseded"
	WorkflowCancelled  WorkflowRunStatus = "cancelled"
)

// WorkflowRunStatuses lists every workflow run status.
var WorkflowRunStatuses = []WorkflowRunStatus{
	WorkflowRunning, WorkflowWaiting, WorkflowSucceeded, WorkflowFailed, WorkflowSuperseded, WorkflowCancelled,
}

// Valid reports whether s is a known workflow run status.
func (s WorkflowRunStatus) Valid() bool { return slices.Contains(WorkflowRunStatuses, s) }

// StepStatus is the state of one step of a workflow run: pending until its
// event is accepted, then the status of the event's latest run; skipped when
// the workflow run ended before the step was accepted.
type StepStatus string

// Step statuses beyond the run statuses a step takes from its run.
const (
	StepPending StepStatus = "pending"
	StepHeld    StepStatus = "held"
	StepSkipped StepStatus = "skipped"
)

// ResourcePlaceholder is the one placeholder of a step's resource template:
// the workflow run's resource.
const ResourcePlaceholder = "{resource}"

// Workflow is a named DAG of steps, each an event of its own stream.
type Workflow struct {
	Name string
	// Steps are in a topological order: every step comes after its needs,
	// and steps without an order between them come in the order they were
	// written (NewWorkflowInOrder), else in name order.
	Steps []*WorkflowStep
}

// WorkflowStep is one step of a workflow.
type WorkflowStep struct {
	Name string
	Kind string
	// Resource is a template: ResourcePlaceholder stands for the workflow
	// run's resource.
	Resource string
	Needs    []string
	// Approval makes the step's run wait for an operator (SPEC §11).
	Approval bool
}

// NewWorkflow orders steps topologically and checks the DAG: every need
// names a step, no step needs itself through any path, no two steps
// resolve to one stream, and each resource template is well formed. Its
// error names the step (and field) at fault.
func NewWorkflow(name string, steps map[string]*WorkflowStep) (*Workflow, error) {
	return NewWorkflowInOrder(name, nil, steps)
}

// NewWorkflowInOrder is NewWorkflow for steps written in order (their
// names, as in the configuration): steps without an order between them
// keep it, so that a workflow's steps are listed as they were written
// wherever their needs allow. An order that does not name every step
// exactly once is ignored (name order). Errors name the same step
// whatever the order: the first in name order.
func NewWorkflowInOrder(name string, order []string, steps map[string]*WorkflowStep) (*Workflow, error) {
	if len(steps) == 0 {
		return nil, &WorkflowError{Field: "steps", Message: "at least one step is required"}
	}
	names := make([]string, 0, len(steps))
	for n := range steps {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		s := steps[n]
		s.Name = n
		if s.Resource == "" {
			s.Resource = ResourcePlaceholder
		}
		if err := checkTemplate(s.Resource); err != nil {
			return nil, &WorkflowError{Step: n, Field: "resource", Message: err.Error()}
		}
		seen := map[string]bool{}
		for _, need := range s.Needs {
			if _, ok := steps[need]; !ok {
				return nil, &WorkflowError{Step: n, Field: "needs", Message: fmt.Sprintf("unknown step %q", need)}
			}
			if seen[need] {
				return nil, &WorkflowError{Step: n, Field: "needs", Message: fmt.Sprintf("%q is listed twice", need)}
			}
			seen[need] = true
		}
	}
	sorted, err := topoOrder(names, steps)
	if err != nil {
		return nil, err
	}
	w := &Workflow{Name: name, Steps: sorted}
	for i, a := range sorted {
		for _, b := range sorted[i+1:] {
			if a.Kind == b.Kind && templatesMayMeet(a.Resource, b.Resource) {
				return nil, &WorkflowError{Step: b.Name, Field: "resource",
					Message: fmt.Sprintf("resolves to the same stream as step %q (%s %s)", a.Name, a.Kind, a.Resource)}
			}
		}
	}
	if written := slices.Sorted(slices.Values(order)); slices.Equal(written, names) {
		// The same DAG, checked above: no cycle in this order either.
		if w.Steps, err = topoOrder(order, steps); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// topoOrder returns the steps with every step after its needs, or an error
// naming a step on a cycle. Of the steps whose needs are all placed, the
// first in names comes next: the topological order closest to names.
func topoOrder(names []string, steps map[string]*WorkflowStep) ([]*WorkflowStep, error) {
	order := make([]*WorkflowStep, 0, len(names))
	placed := make(map[string]bool, len(names))
	for len(order) < len(names) {
		next := -1
		for i, n := range names {
			if !placed[n] && !slices.ContainsFunc(steps[n].Needs, func(need string) bool { return !placed[need] }) {
				next = i
				break
			}
		}
		if next < 0 {
			for _, n := range names {
				if !placed[n] {
					return nil, &WorkflowError{Step: n, Field: "needs", Message: "is part of a cycle: " + strings.Join(cycleFrom(n, steps), " -> ")}
				}
			}
		}
		placed[names[next]] = true
		order = append(order, steps[names[next]])
	}
	return order, nil
}

// cycleFrom follows needs from start until a step repeats and returns the
// cycle found, which start leads into.
func cycleFrom(start string, steps map[string]*WorkflowStep) []string {
	var path []string
	at := map[string]int{}
	n := start
	for {
		if i, ok := at[n]; ok {
			return append(path[i:], n)
		}
		at[n] = len(path)
		path = append(path, n)
		needs := slices.Clone(steps[n].Needs)
		slices.Sort(needs)
		next := ""
		for _, m := range needs {
			// Only steps still on some cycle lead back; any need that is
			// part of a cycle will do.
			if onCycle(m, steps) {
				next = m
				break
			}
		}
		if next == "" {
			return path
		}
		n = next
	}
}

// onCycle reports whether step n can reach itself through needs.
func onCycle(n string, steps map[string]*WorkflowStep) bool {
	seen := map[string]bool{}
	var reach func(string) bool
	reach = func(m string) bool {
		for _, x := range steps[m].Needs {
			if x == n {
				return true
			}
			if !seen[x] {
				seen[x] = true
				if reach(x) {
					return true
				}
			}
		}
		return false
	}
	return reach(n)
}

// checkTemplate reports whether t is a resource template: key characters
// and ResourcePlaceholder, nothing else in braces, resolving to a valid key
// for a one-character resource.
func checkTemplate(t string) error {
	probe, err := expandTemplate(t, "x")
	if err != nil {
		return err
	}
	if err := ValidateResource(probe); err != nil {
		return fmt.Errorf("template %q: a resolved key %w", t, err)
	}
	return nil
}

// expandTemplate puts resource in place of every ResourcePlaceholder of t.
func expandTemplate(t, resource string) (string, error) {
	var b strings.Builder
	for {
		i := strings.IndexAny(t, "{}")
		if i < 0 {
			b.WriteString(t)
			return b.String(), nil
		}
		if !strings.HasPrefix(t[i:], ResourcePlaceholder) {
			return "", fmt.Errorf("template %q: the only placeholder is %s", t, ResourcePlaceholder)
		}
		b.WriteString(t[:i])
		b.WriteString(resource)
		t = t[i+len(ResourcePlaceholder):]
	}
}

// templatesMayMeet reports whether two resource templates could resolve to
// the same key for some workflow resource: equal templates always do; a
// constant key and a template do when the key is the template around a
// valid resource ("x/y" and "x/{resource}", for resource y); otherwise a
// few probe resources are tried. Steps the probes miss are refused when a
// workflow run would resolve them to one stream (Workflow.StepResources).
func templatesMayMeet(a, b string) bool {
	if a == b {
		return true
	}
	if r, ok := constantInTemplate(a, b); ok && ValidateResource(r) == nil {
		return true
	}
	if r, ok := constantInTemplate(b, a); ok && ValidateResource(r) == nil {
		return true
	}
	for _, r := range []string{"x", "a", "aa", "a/b", "0"} {
		ra, _ := expandTemplate(a, r)
		rb, _ := expandTemplate(b, r)
		if ra == rb {
			return true
		}
	}
	return false
}

// constantInTemplate returns the resource for which template t, with one
// placeholder, resolves to the constant key c, if there is one.
func constantInTemplate(c, t string) (string, bool) {
	if strings.Contains(c, "{") || strings.Count(t, ResourcePlaceholder) != 1 {
		return "", false
	}
	prefix, suffix, _ := strings.Cut(t, ResourcePlaceholder)
	if len(c) <= len(prefix)+len(suffix) || !strings.HasPrefix(c, prefix) || !strings.HasSuffix(c, suffix) {
		return "", false
	}
	return c[len(prefix) : len(c)-len(suffix)], true
}

// StepResources resolves the stream of each step of w for a workflow run
// of resource, by step name. A step resolving to an invalid key, or two
// steps of one kind resolving to the same key (one stream: what start-up
// refuses when the templates show it, SPEC §10), is an error naming them.
func (w *Workflow) StepResources(resource string) (map[string]string, error) {
	out := make(map[string]string, len(w.Steps))
	byStream := make(map[[2]string]string, len(w.Steps))
	for _, st := range w.Steps {
		r, err := st.StepResource(resource)
		if err != nil {
			return nil, err
		}
		if other, ok := byStream[[2]string{st.Kind, r}]; ok {
			return nil, fmt.Errorf("steps %s and %s both resolve to the stream %s %s; each step needs a stream of its own", other, st.Name, st.Kind, r)
		}
		byStream[[2]string{st.Kind, r}] = st.Name
		out[st.Name] = r
	}
	return out, nil
}

// StepResource resolves step's resource template for a workflow run of
// resource; the result is checked as a resource key.
func (s *WorkflowStep) StepResource(resource string) (string, error) {
	key, err := expandTemplate(s.Resource, resource)
	if err != nil {
		return "", err
	}
	if err := ValidateResource(key); err != nil {
		return "", fmt.Errorf("step %s resolves to %q, which %w", s.Name, key, err)
	}
	return key, nil
}

// Step returns the step called name, or nil.
func (w *Workflow) Step(name string) *WorkflowStep {
	for _, s := range w.Steps {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// Roots returns the steps without needs, in order.
func (w *Workflow) Roots() []*WorkflowStep {
	var out []*WorkflowStep
	for _, s := range w.Steps {
		if len(s.Needs) == 0 {
			out = append(out, s)
		}
	}
	return out
}

// Dependents returns the steps that need step name, in order.
func (w *Workflow) Dependents(name string) []*WorkflowStep {
	var out []*WorkflowStep
	for _, s := range w.Steps {
		if slices.Contains(s.Needs, name) {
			out = append(out, s)
		}
	}
	return out
}

// Behind returns every step that depends on step name directly or
// through other steps, in order.
func (w *Workflow) Behind(name string) []*WorkflowStep {
	behind := map[string]bool{name: true}
	var out []*WorkflowStep
	for _, s := range w.Steps {
		for _, n := range s.Needs {
			if behind[n] {
				behind[s.Name] = true
				out = append(out, s)
				break
			}
		}
	}
	return out
}

// WorkflowError is a problem with a workflow's definition.
type WorkflowError struct {
	Step    string // empty for the workflow as a whole
	Field   string
	Message string
}

func (e *WorkflowError) Error() string {
	if e.Step == "" {
		return e.Field + ": " + e.Message
	}
	return "steps." + e.Step + "." + e.Field + ": " + e.Message
}

// Key returns the configuration key the error is about, below the
// workflow's own key.
func (e *WorkflowError) Key() string {
	if e.Step == "" {
		return e.Field
	}
	return "steps." + e.Step + "." + e.Field
}

// WorkflowRun is one run of a workflow for a resource at a version.
type WorkflowRun struct {
	ID         uuid.UUID
	Workflow   string
	Resource   string
	Version    int64
	Status     WorkflowRunStatus
	Payload    json.RawMessage
	Steps      []*WorkflowRunStep
	CreatedAt  time.Time
	FinishedAt *time.Time
	// TraceID is the trace of the workflow run's start, which every step's
	// run joins (SPEC §14); nil when tracing was off.
	TraceID *string
}

// WorkflowRunStep is one step of a workflow run.
type WorkflowRunStep struct {
	Name     string
	Kind     string
	Resource string
	Needs    []string
	Status   StepStatus
	EventID  *uuid.UUID
	RunID    *uuid.UUID
	// DeadLetterID is the open or latest dead letter of the step's run,
	// when it failed.
	DeadLetterID *uuid.UUID
}

// WorkflowRunStart is what a client asks to start.
type WorkflowRunStart struct {
	Workflow string
	Resource string
	Version  int64
	Payload  json.RawMessage
}

// WorkflowRunListParams filters and pages a list of workflow runs.
type WorkflowRunListParams struct {
	Workflow string
	Resource string
	Status   WorkflowRunStatus
	Cursor   *uuid.UUID
	Limit    int
}

// StepPayload is the payload of a step's event: the workflow run's payload
// and the outputs of the step's needs.
func StepPayload(payload json.RawMessage, needs map[string]json.RawMessage) (json.RawMessage, error) {
	if len(payload) == 0 {
		payload = json.RawMessage(`{}`)
	}
	if needs == nil {
		needs = map[string]json.RawMessage{}
	}
	for k, v := range needs {
		if len(v) == 0 {
			needs[k] = json.RawMessage(`null`)
		}
	}
	return json.Marshal(struct {
		Payload json.RawMessage            `json:"payload"`
		Needs   map[string]json.RawMessage `json:"needs"`
	}{payload, needs})
}
