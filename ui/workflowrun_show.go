package ui

import (
	"net/http"
	"slices"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"

	"github.com/converge-run/converge"
)

type workflowRunShowData struct {
	Run   *converge.WorkflowRun
	Graph *graph
	// Progress is "succeeded/total" of the steps.
	Progress string
	// Approvals are the runs of the steps held for approval, by step
	// name, for an operator's approve and reject (SPEC §11).
	Approvals map[string]*uuid.UUID
}

func (u *UI) handleWorkflowRunShow(w http.ResponseWriter, r *http.Request) {
	id, err := uuid.Parse(chi.URLParam(r, "id"))
	if err != nil {
		u.handleNotFound(w, r)
		return
	}
	run, err := u.store.WorkflowRunGet(r.Context(), id)
	if err != nil {
		u.appError(w, r, err)
		return
	}
	approvals := map[string]*uuid.UUID{}
	for _, st := range run.Steps {
		if st.Status != converge.StepHeld || st.RunID == nil {
			continue
		}
		held, err := u.store.RunGet(r.Context(), *st.RunID)
		if err != nil {
			u.appError(w, r, err)
			return
		}
		if slices.Contains(held.Hold, converge.HoldApproval) {
			approvals[st.Name] = st.RunID
		}
	}
	u.render(w, r, http.StatusOK, "workflow_run", &view{Title: "Workflow run " + run.Workflow + " " + run.Resource, Nav: "workflow-runs",
		Flash: u.takeFlash(r), Data: &workflowRunShowData{Run: run, Graph: layoutGraph(run.Steps), Progress: progress(run), Approvals: approvals}})
}
