package ui

import (
	"net/http"
	"strings"

	"github.com/converge-run/converge"
)

type streamsData struct {
	Kinds    []string
	Kind     string
	Resource string
	Problem  string
	Events   []*converge.Event
}

// handleStreamList finds a stream by kind and resource, and lists the
// streams of the most recent events.
func (u *UI) handleStreamList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	d := &streamsData{Kinds: u.kinds, Kind: q.Get("kind"), Resource: strings.TrimSpace(q.Get("resource"))}
	status := http.StatusOK
	if d.Resource != "" {
		if err := converge.ValidateResource(d.Resource); err != nil {
			d.Problem = "Resource " + err.Error() + "."
			status = http.StatusUnprocessableEntity
		} else {
			http.Redirect(w, r, streamURL(d.Kind, d.Resource), http.StatusSeeOther)
			return
		}
	}
	events, _, err := u.store.EventList(r.Context(), converge.EventListParams{Limit: 25})
	if err != nil {
		u.serverError(w, r, err)
		return
	}
	d.Events = events
	u.render(w, r, status, "streams", &view{Title: "Streams", Nav: "streams", Data: d})
}
