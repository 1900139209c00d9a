package ui

import (
	"net/http"
	"slices"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"

	"github.com/converge-run/converge"
)

type eventShowData struct {
	Event *converge.Event
	// Runs are the event's runs, newest first.
	Runs []*converge.Run
}

func (u *UI) handleEventShow(w http.ResponseWriter, r *http.Request) {
	id, err := uuid.Parse(chi.URLParam(r, "id"))
	if err != nil {
		u.handleNotFound(w, r)
		return
	}
	ev, err := u.store.EventGet(r.Context(), id)
	if err != nil {
		u.appError(w, r, err)
		return
	}
	runs := slices.Clone(ev.Runs)
	slices.Reverse(runs)
	u.render(w, r, http.StatusOK, "event", &view{Title: "Event " + ev.Kind + " " + ev.Resource, Nav: "streams",
		Flash: u.takeFlash(r), Data: &eventShowData{Event: ev, Runs: runs}})
}
