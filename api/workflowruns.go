package api

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/store"
	"github.com/converge-run/converge/telemetry"
)

// workflowRun is the JSON shape of a workflow run (SPEC §10).
type workflowRun struct {
	ID         uuid.UUID                  `json:"id"`
	Workflow   string                     `json:"workflow"`
	Resource   string                     `json:"resource"`
	Version    int64                      `json:"version"`
	Status     converge.WorkflowRunStatus `json:"status"`
	Payload    json.RawMessage            `json:"payload"`
	Steps      []workflowRunStep          `json:"steps"`
	CreatedAt  time.Time                  `json:"created_at"`
	FinishedAt *time.Time                 `json:"finished_at"`
	TraceID    *string                    `json:"trace_id"`
}

// workflowRunStep is the JSON shape of one step of a workflow run.
type workflowRunStep struct {
	Name     string              `json:"name"`
	Kind     string              `json:"kind"`
	Resource string              `json:"resource"`
	Needs    []string            `json:"needs"`
	Status   converge.StepStatus `json:"status"`
	EventID  *uuid.UUID          `json:"event_id"`
	RunID    *uuid.UUID          `json:"run_id"`
}

func newWorkflowRun(w *converge.WorkflowRun) workflowRun {
	out := workflowRun{ID: w.ID, Workflow: w.Workflow, Resource: w.Resource, Version: w.Version, Status: w.Status,
		Payload: w.Payload, Steps: make([]workflowRunStep, len(w.Steps)), CreatedAt: w.CreatedAt, FinishedAt: w.FinishedAt,
		TraceID: w.TraceID}
	for i, s := range w.Steps {
		out.Steps[i] = workflowRunStep{Name: s.Name, Kind: s.Kind, Resource: s.Resource, Needs: s.Needs, Status: s.Status,
			EventID: s.EventID, RunID: s.RunID}
	}
	return out
}

// workflowRunRequest is the body of POST /v1/workflow-runs.
type workflowRunRequest struct {
	Workflow *string         `json:"workflow"`
	Resource *string         `json:"resource"`
	Version  json.RawMessage `json:"version"`
	Payload  json.RawMessage `json:"payload"`
}

// DecodeWorkflowRunStart reads and validates the body of POST
// /v1/workflow-runs against the configured workflows.
func DecodeWorkflowRunStart(body io.Reader, workflows map[string]*converge.Workflow, maxPayload int64) (*converge.WorkflowRunStart, error) {
	var req workflowRunRequest
	if err := decodeStrictJSON(body, maxPayload, &req); err != nil {
		return nil, err
	}
	var fields fieldErrors
	start := &converge.WorkflowRunStart{}
	switch {
	case req.Workflow == nil:
		fields.add("workflow", "is required")
	case workflows[*req.Workflow] == nil:
		fields.add("workflow", fmt.Sprintf("unknown workflow %q (configured: %s)", truncate(*req.Workflow, 64), strings.Join(workflowNames(workflows), ", ")))
	default:
		start.Workflow = *req.Workflow
	}
	var err error
	start.Resource, start.Version, start.Payload, err = streamFields(req.Resource, req.Version, req.Payload, maxPayload, &fields)
	if err != nil {
		return nil, err
	}
	if err := fields.err(); err != nil {
		return nil, err
	}
	return start, nil
}

func workflowNames(workflows map[string]*converge.Workflow) []string {
	names := make([]string, 0, len(workflows))
	for n := range workflows {
		names = append(names, n)
	}
	slices.Sort(names)
	if len(names) == 0 {
		return []string{"none"}
	}
	return names
}

func (s *Server) handleWorkflowRunCreate(w http.ResponseWriter, r *http.Request) {
	if err := unsupportedBody(r); err != nil {
		writeProblem(w, r, err)
		return
	}
	body := http.MaxBytesReader(w, r.Body, s.cfg.MaxPayloadBytes+envelopeBytes)
	start, err := DecodeWorkflowRunStart(body, s.cfg.Workflows, s.cfg.MaxPayloadBytes)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	def := s.cfg.Workflows[start.Workflow]
	policies := store.StepPolicies(def, s.cfg.Kinds)
	ctx, span := telemetry.StartWorkflowRunStart(r.Context(), start.Workflow, start.Resource, start.Version)
	res, err := s.store.WorkflowRunStart(ctx, store.WorkflowRunStartParams{WorkflowRunStart: *start, Definition: def, Policies: policies,
		TraceParent: telemetry.TraceParent(ctx)})
	if res != nil {
		telemetry.EndWorkflowRunStart(span, res.WorkflowRun, res.Replay, err)
	} else {
		telemetry.EndWorkflowRunStart(span, nil, false, err)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	status := http.StatusAccepted
	if res.Replay {
		status = http.StatusOK
	} else {
		// The workflow run's statuses, its first included, are counted by
		// the store after each commit (Store.ObserveWorkflowRuns).
		for _, st := range res.WorkflowRun.Steps {
			if st.EventID != nil {
				s.cfg.Metrics.EventAccepted(st.Kind, telemetry.SourceWorkflow)
			}
		}
	}
	s.writeJSON(w, r, status, map[string]workflowRun{"workflow_run": newWorkflowRun(res.WorkflowRun)})
}

// ParseWorkflowRunListParams reads the query of GET /v1/workflow-runs.
func ParseWorkflowRunListParams(r *http.Request) (converge.WorkflowRunListParams, error) {
	l, err := parseListQuery[converge.WorkflowRunStatus](r, listQuerySpec{
		name:          "workflow",
		nameOK:        func(workflow string) bool { return converge.ValidateKind(workflow) == nil },
		nameProblem:   "is not a workflow name (1-63 characters of a-z 0-9 _ -, starting with a letter)",
		statusProblem: "must be one of running, waiting, succeeded, failed, superseded, cancelled",
	})
	if err != nil {
		return converge.WorkflowRunListParams{}, err
	}
	return converge.WorkflowRunListParams{Workflow: l.name, Resource: l.resource, Status: l.status, Cursor: l.cursor, Limit: l.limit}, nil
}

func (s *Server) handleWorkflowRunList(w http.ResponseWriter, r *http.Request) {
	p, err := ParseWorkflowRunListParams(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	items, next, err := s.store.WorkflowRunList(r.Context(), p)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := make([]workflowRun, len(items))
	for i, it := range items {
		out[i] = newWorkflowRun(it)
	}
	s.writeJSON(w, r, http.StatusOK, newPage(out, next))
}

func (s *Server) handleWorkflowRunGet(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "id")
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	run, err := s.store.WorkflowRunGet(r.Context(), id)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, newWorkflowRun(run))
}

func (s *Server) handleWorkflowRunCancel(w http.ResponseWriter, r *http.Request) {
	id, audit, err := s.actionRequest(w, r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	run, err := s.store.WorkflowRunCancel(r.Context(), id, audit)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, newWorkflowRun(run))
}
