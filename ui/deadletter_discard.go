package ui

import (
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"
)

// handleDeadLetterDiscard discards one dead letter.
func (u *UI) handleDeadLetterDiscard(w http.ResponseWriter, r *http.Request) {
	id, err := uuid.Parse(chi.URLParam(r, "id"))
	if err != nil {
		u.handleNotFound(w, r)
		return
	}
	_, err = u.store.DeadLetterDiscard(r.Context(), id, u.audit(r))
	u.afterAction(w, r, "/ui/dead-letters/"+id.String(), err, func() string { return "Discarded." })
}
