package ui

import (
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"
)

// handleRunCancel cancels an unfinished run, then returns to the page the
// form was on.
func (u *UI) handleRunCancel(w http.ResponseWriter, r *http.Request) {
	id, err := uuid.Parse(chi.URLParam(r, "id"))
	if err != nil {
		u.handleNotFound(w, r)
		return
	}
	back := safeNext(r.PostFormValue("back"))
	_, err = u.store.RunCancel(r.Context(), id, u.audit(r))
	u.afterAction(w, r, back, err, func() string { return "Run cancelled." })
}
