package ui

import (
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"

	"github.com/converge-run/converge"
)

type workflowRunShowData struct {
	Run   *converge.WorkflowRun
	Graph *graph
	// Progress is "succeeded/total" of the steps.
	Progress string
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
	u.render(w, r, http.StatusOK, "workflow_run", &view{Title: "Workflow run " + run.Workflow + " " + run.Resource, Nav: "workflow-runs",
		Flash: u.takeFlash(r), Data: &workflowRunShowData{Run: run, Graph: layoutGraph(run.Steps), Progress: progress(run)}})
}
