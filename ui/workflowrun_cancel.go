package ui

import (
	"errors"
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"

	"github.com/converge-run/converge/store"
)

// handleWorkflowRunCancel cancels a workflow run that is not final (its
// unfinished step runs cancelled, pending steps skipped), then returns to
// its page.
func (u *UI) handleWorkflowRunCancel(w http.ResponseWriter, r *http.Request) {
	id, err := uuid.Parse(chi.URLParam(r, "id"))
	if err != nil {
		u.handleNotFound(w, r)
		return
	}
	_, err = u.store.WorkflowRunCancel(r.Context(), id, u.audit(r))
	if errors.Is(err, store.ErrRunFinished) {
		u.setFlash(r, flash{Kind: "error", Message: "This workflow run is already final: nothing was cancelled."})
		http.Redirect(w, r, "/ui/workflow-runs/"+id.String(), http.StatusSeeOther)
		return
	}
	u.afterAction(w, r, "/ui/workflow-runs/"+id.String(), err, func() string { return "Workflow run cancelled." })
}
