package ui

import (
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/store"
)

type eventShowData struct {
	Event *converge.Event
	// Runs are the event's runs, newest first.
	Runs []*converge.Run
	// Actions are the operator actions on each run (approve, reject,
	// cancel), newest first, by run id.
	Actions map[uuid.UUID][]operatorAction
}

// operatorAction is an operator's action on a run, for its card.
type operatorAction struct {
	At           time.Time
	Verb, Detail string
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
	d := &eventShowData{Event: ev, Runs: runs, Actions: map[uuid.UUID][]operatorAction{}}
	entries, _, err := u.store.AuditList(r.Context(), store.AuditListParams{Limit: operatorActionsPerPage, Targets: operatorTargets([]*converge.Event{ev})})
	if err != nil {
		u.serverError(w, r, err)
		return
	}
	for _, a := range entries {
		if a.Action == workflowCancelAction && len(runs) > 0 {
			// On the step's latest run: the one the cancel ended, or
			// left failed with its dead letter.
			d.Actions[runs[0].ID] = append(d.Actions[runs[0].ID], operatorAction{At: a.At, Verb: "Workflow run cancelled by an operator", Detail: operatorDetail(a)})
			continue
		}
		verb, ok := operatorActionVerbs[a.Action]
		if !ok {
			continue
		}
		for _, t := range a.Targets {
			if id, err := uuid.Parse(t); err == nil {
				d.Actions[id] = append(d.Actions[id], operatorAction{At: a.At, Verb: strings.ToUpper(verb[:1]) + verb[1:], Detail: operatorDetail(a)})
			}
		}
	}
	u.render(w, r, http.StatusOK, "event", &view{Title: "Event " + ev.Kind + " " + ev.Resource, Nav: "streams",
		Flash: u.takeFlash(r), Data: d})
}
