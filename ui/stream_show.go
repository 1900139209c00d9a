package ui

import (
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/store"
)

// streamEventsPerPage is how many events one page of a stream's history
// covers.
const streamEventsPerPage = 20

// entry is one line of a stream's history.
type entry struct {
	At      time.Time
	Version int64
	// What is the kind of line: event, run, attempt, supersession,
	// dead-letter, redrive, discard, succeeded, failed, cancelled,
	// operator (an approval, a rejection or a cancel), release (of the
	// stream's quarantine: no version).
	What    string
	Title   string
	Detail  string
	Status  string
	EventID uuid.UUID
	RunID   uuid.UUID
	// DeadLetterID links the dead letter of a failed run.
	DeadLetterID *uuid.UUID
	// WorkflowRunID links, on an event's line, the workflow run the event
	// is a step of.
	WorkflowRunID *uuid.UUID
	Attempt       *converge.Attempt
	order         int
}

type streamShowData struct {
	Stream  *converge.Stream
	Entries []entry
	NextURL string
	// Events is how many events this page covers.
	Events   int
	FirstURL string
}

func (u *UI) handleStreamShow(w http.ResponseWriter, r *http.Request) {
	kind := chi.URLParam(r, "kind")
	resource := strings.TrimPrefix(chi.URLParam(r, "*"), "/")
	if converge.ValidateResource(resource) != nil || converge.ValidateKind(kind) != nil {
		u.handleNotFound(w, r)
		return
	}
	var before int64
	if s := r.URL.Query().Get("before"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 1 {
			u.errorPage(w, r, http.StatusUnprocessableEntity, "Invalid page", "before must be a positive version.")
			return
		}
		before = n
	}
	h, err := u.store.StreamHistoryGet(r.Context(), store.StreamHistoryParams{Kind: kind, Resource: resource, Before: before, Limit: streamEventsPerPage})
	if err != nil {
		u.appError(w, r, err)
		return
	}
	var runs []uuid.UUID
	for _, e := range h.Events {
		for _, run := range e.Runs {
			runs = append(runs, run.ID)
		}
	}
	dls, err := u.store.DeadLettersOfRuns(r.Context(), runs)
	if err != nil {
		u.serverError(w, r, err)
		return
	}
	actions, err := u.streamOperatorActions(r, kind, resource, h.Events)
	if err != nil {
		u.serverError(w, r, err)
		return
	}
	d := &streamShowData{Stream: h.Stream, Entries: historyEntries(h.Events, dls, actions), Events: len(h.Events)}
	page := streamURL(kind, resource)
	if h.NextBefore > 0 {
		d.NextURL = page + "?before=" + strconv.FormatInt(h.NextBefore, 10)
	}
	if before > 0 {
		d.FirstURL = page
	}
	u.render(w, r, http.StatusOK, "stream", &view{Title: kind + " " + resource, Nav: "streams", Flash: u.takeFlash(r), Data: d})
}

// streamOperatorActions returns the audit entries that name the runs of
// events, the workflow runs they are steps of, or the stream itself (a
// quarantine release), newest first: who approved, rejected or cancelled
// a run, cancelled a workflow run, and released the stream. (Redrives and
// discards are on the dead letters' lines already.)
func (u *UI) streamOperatorActions(r *http.Request, kind, resource string, events []*converge.Event) ([]*converge.AuditEntry, error) {
	targets := append([]string{kind + "/" + resource}, operatorTargets(events)...)
	items, _, err := u.store.AuditList(r.Context(), store.AuditListParams{Limit: operatorActionsPerPage, Targets: targets})
	return items, err
}

// operatorEntries turns the audit entries of operator actions into history
// lines: on the runs of events they name, and the quarantine releases of
// the stream (no version of their own).
func operatorEntries(events []*converge.Event, actions []*converge.AuditEntry) []entry {
	type runAt struct {
		event *converge.Event
		run   *converge.Run
	}
	runs := map[string]runAt{}
	for _, e := range events {
		for _, run := range e.Runs {
			runs[run.ID.String()] = runAt{e, run}
		}
	}
	var out []entry
	for _, a := range actions {
		detail := operatorDetail(a)
		switch a.Action {
		case "quarantine.release":
			out = append(out, entry{At: a.At, What: "release", Title: "Quarantine released", Detail: detail, order: 6})
			continue
		case workflowCancelAction:
			for _, e := range events {
				if e.WorkflowRunID != nil && slices.Contains(a.Targets, e.WorkflowRunID.String()) {
					out = append(out, entry{At: a.At, Version: e.Version, What: "operator", Detail: detail,
						Title: "Workflow run cancelled by an operator", EventID: e.ID, order: 6})
				}
			}
			continue
		}
		verb, ok := operatorActionVerbs[a.Action]
		if !ok {
			continue
		}
		for _, target := range a.Targets {
			if at, ok := runs[target]; ok {
				out = append(out, entry{At: a.At, Version: at.event.Version, What: "operator", Detail: detail,
					Title: "Run #" + strconv.Itoa(at.run.Number) + " " + verb, EventID: at.event.ID, RunID: at.run.ID, order: 6})
			}
		}
	}
	return out
}

// heldByActions returns, by run id, what held the runs that operators'
// actions let go: an approval (run.approve names the run) or a quarantine
// (quarantine.release names the run it queued in its detail), in the
// order the actions came (newest first).
func heldByActions(actions []*converge.AuditEntry) map[string][]string {
	out := map[string][]string{}
	add := func(run, hold string) {
		if !slices.Contains(out[run], hold) {
			out[run] = append(out[run], hold)
		}
	}
	for _, a := range actions {
		switch a.Action {
		case "run.approve":
			for _, t := range a.Targets {
				add(t, converge.HoldApproval)
			}
		case "quarantine.release":
			if run, ok := a.Detail["run_id"].(string); ok {
				add(run, converge.HoldQuarantine)
			}
		}
	}
	return out
}

// historyEntries flattens events, runs, attempts, dead letters and the
// operator actions on them into one history, newest first.
func historyEntries(events []*converge.Event, dls map[uuid.UUID]*converge.DeadLetter, actions []*converge.AuditEntry) []entry {
	var out []entry
	versions := make([]int64, len(events))
	for i, e := range events {
		versions[i] = e.Version
	}
	// nextVersion is the version accepted after v among these events.
	nextVersion := func(v int64) int64 {
		var best int64
		for _, x := range versions {
			if x > v && (best == 0 || x < best) {
				best = x
			}
		}
		return best
	}
	heldBefore := heldByActions(actions)
	for _, e := range events {
		out = append(out, entry{At: e.ReceivedAt, Version: e.Version, What: "event", Title: "Event accepted",
			EventID: e.ID, WorkflowRunID: e.WorkflowRunID, order: 0})
		for _, run := range e.Runs {
			r := "Run #" + strconv.Itoa(run.Number)
			queued := entry{At: run.CreatedAt, Version: e.Version, What: "run", Title: r + " queued", EventID: e.ID, RunID: run.ID, order: 1}
			if run.Number == 1 {
				// The first run is made with its event, in one transaction.
				queued.At = e.ReceivedAt
			} else {
				queued.What, queued.Title = "redrive", r+" queued by a redrive"
			}
			// A run made held keeps its hold while held and after it ends
			// superseded or cancelled: it was never queued. One approved or
			// released since has no hold left: the audit entries of its
			// approval or release say what held it.
			hold := run.Hold
			if len(hold) == 0 {
				hold = heldBefore[run.ID.String()]
			}
			if len(hold) > 0 {
				queued.Title = r + " held"
				if run.Number > 1 {
					queued.Title = r + " made by a redrive, held"
				}
				queued.Detail = "for " + strings.Join(hold, " and ")
			}
			out = append(out, queued)
			for _, a := range run.AttemptHistory {
				status := string(a.Outcome)
				if status == "" {
					status = "in flight"
				}
				out = append(out, entry{At: a.StartedAt, Version: e.Version, What: "attempt",
					Title: "Attempt " + strconv.Itoa(a.Number) + " of run #" + strconv.Itoa(run.Number), Status: status,
					EventID: e.ID, RunID: run.ID, Attempt: a, order: 2})
			}
			if run.FinishedAt == nil {
				continue
			}
			end := entry{At: *run.FinishedAt, Version: e.Version, What: string(run.Status), Status: string(run.Status),
				Title: r, EventID: e.ID, RunID: run.ID, order: 3}
			switch run.Status {
			case converge.RunSuperseded:
				end.What = "supersession"
				if nv := nextVersion(e.Version); nv > 0 {
					end.Detail = "by version " + strconv.FormatInt(nv, 10)
				} else {
					end.Detail = "by a newer version"
				}
			case converge.RunFailed:
				if run.Error != nil {
					end.Detail = run.Error.Message
				}
			}
			out = append(out, end)
			dl, ok := dls[run.ID]
			if !ok {
				continue
			}
			id := dl.ID
			out = append(out, entry{At: dl.CreatedAt, Version: e.Version, What: "dead-letter", Status: string(dl.Reason),
				Title: "Dead-lettered", EventID: e.ID, RunID: run.ID, DeadLetterID: &id, order: 4})
			if dl.ResolvedAt == nil {
				continue
			}
			res := entry{At: *dl.ResolvedAt, Version: e.Version, What: string(dl.Status), Status: string(dl.Status),
				Title: "Dead letter", EventID: e.ID, RunID: run.ID, DeadLetterID: &id, order: 5}
			if dl.ResolvedBy != nil {
				res.Detail = "by " + *dl.ResolvedBy
			}
			switch dl.Status {
			case converge.DeadLetterRedriven:
				res.What = "redrive"
			case converge.DeadLetterSuperseded:
				res.What = "supersession"
				if dl.SupersededByVersion != nil {
					res.Detail = "version " + strconv.FormatInt(*dl.SupersededByVersion, 10) + " succeeded"
				}
			}
			out = append(out, res)
		}
	}
	out = append(out, operatorEntries(events, actions)...)
	sort.SliceStable(out, func(i, j int) bool {
		if !out[i].At.Equal(out[j].At) {
			return out[i].At.After(out[j].At)
		}
		if out[i].Version != out[j].Version {
			return out[i].Version > out[j].Version
		}
		return out[i].order > out[j].order
	})
	return out
}
