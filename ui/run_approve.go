package ui

import (
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"
)

// handleRunApprove clears a held run's approval hold, then returns to the
// page the form was on.
func (u *UI) handleRunApprove(w http.ResponseWriter, r *http.Request) {
	id, err := uuid.Parse(chi.URLParam(r, "id"))
	if err != nil {
		u.handleNotFound(w, r)
		return
	}
	back := safeNext(r.PostFormValue("back"))
	_, err = u.store.RunApprove(r.Context(), id, u.audit(r))
	u.afterAction(w, r, back, err, func() string { return "Run approved." })
}

// handleRunReject ends a held run cancelled, then returns to the page the
// form was on.
func (u *UI) handleRunReject(w http.ResponseWriter, r *http.Request) {
	id, err := uuid.Parse(chi.URLParam(r, "id"))
	if err != nil {
		u.handleNotFound(w, r)
		return
	}
	back := safeNext(r.PostFormValue("back"))
	_, err = u.store.RunReject(r.Context(), id, u.audit(r))
	u.afterAction(w, r, back, err, func() string { return "Run rejected." })
}
