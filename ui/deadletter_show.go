package ui

import (
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"

	"github.com/converge-run/converge"
)

type deadLetterShowData struct {
	DL     *converge.DeadLetter
	Run    *converge.Run
	Stream *converge.Stream
	// Newer is set when a newer version of the stream was accepted since:
	// a redrive would be refused.
	Newer bool
}

func (u *UI) handleDeadLetterShow(w http.ResponseWriter, r *http.Request) {
	id, err := uuid.Parse(chi.URLParam(r, "id"))
	if err != nil {
		u.handleNotFound(w, r)
		return
	}
	dl, err := u.store.DeadLetterGet(r.Context(), id)
	if err != nil {
		u.appError(w, r, err)
		return
	}
	run, err := u.store.RunGet(r.Context(), dl.RunID)
	if err != nil {
		u.serverError(w, r, err)
		return
	}
	st, err := u.store.StreamGet(r.Context(), dl.Kind, dl.Resource)
	if err != nil {
		u.serverError(w, r, err)
		return
	}
	d := &deadLetterShowData{DL: dl, Run: run, Stream: st, Newer: st.LatestVersion > dl.Version}
	u.render(w, r, http.StatusOK, "dead_letter", &view{Title: "Dead letter " + dl.Kind + " " + dl.Resource, Nav: "dead-letters",
		Flash: u.takeFlash(r), Data: d})
}
