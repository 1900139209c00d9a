package ui

import (
	"net/http"

	"github.com/google/uuid"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/store"
	"github.com/converge-run/converge/telemetry"
)

// maxShown is how many of the dead letters a bulk action affects the
// confirmation lists.
const maxShown = 50

type bulkConfirmData struct {
	Action string
	// Scope is "selected" or "all" (every dead letter matching Filter).
	Scope  string
	Filter filterForm
	// Done are the dead letters the action would affect; Skipped those it
	// would leave, with the reason.
	Done    []uuid.UUID
	Skipped []converge.DeadLetterSkip
	More    bool
	Shown   []*converge.DeadLetter
	BackURL string
	Max     int
}

// handleDeadLetterBulkConfirm is the confirmation step of a bulk action: a
// dry run that shows how many dead letters the action would affect.
func (u *UI) handleDeadLetterBulkConfirm(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	d := &bulkConfirmData{Action: q.Get("action"), Scope: q.Get("scope"), Filter: readFilter(q), Max: converge.MaxDeadLetterBulk}
	d.BackURL = "/ui/dead-letters?" + d.Filter.Query()
	if d.Action != "redrive" && d.Action != "discard" {
		u.errorPage(w, r, http.StatusUnprocessableEntity, "Unknown action", "Choose redrive or discard.")
		return
	}
	p := store.DeadLetterBulkParams{DryRun: true, Kinds: u.cfg.Kinds}
	if d.Scope == "all" {
		f, problems := d.Filter.filter()
		if len(problems) > 0 {
			u.errorPage(w, r, http.StatusUnprocessableEntity, "Invalid filter", "Fix the filter on the list first.")
			return
		}
		p.Filter = f
	} else {
		d.Scope = "selected"
		ids, ok := parseIDs(q["id"])
		if !ok {
			u.errorPage(w, r, http.StatusUnprocessableEntity, "Invalid selection", "The selection holds something that is not a dead letter id.")
			return
		}
		if len(ids) == 0 {
			u.setFlash(r, flash{Kind: "error", Message: "Select at least one dead letter, or choose all that match the filter."})
			http.Redirect(w, r, d.BackURL, http.StatusSeeOther)
			return
		}
		if len(ids) > converge.MaxDeadLetterBulk {
			u.errorPage(w, r, http.StatusUnprocessableEntity, "Too many", "Select at most 1000 dead letters at a time.")
			return
		}
		p.IDs = ids
	}
	res, err := u.bulk(r, d.Action, p)
	if err != nil {
		u.appError(w, r, err)
		return
	}
	d.Done, d.Skipped, d.More = res.Done, res.Skipped, res.More
	for _, id := range d.Done[:min(len(d.Done), maxShown)] {
		dl, err := u.store.DeadLetterGet(r.Context(), id)
		if err != nil {
			u.serverError(w, r, err)
			return
		}
		d.Shown = append(d.Shown, dl)
	}
	u.render(w, r, http.StatusOK, "bulk_confirm", &view{Title: "Confirm " + d.Action, Nav: "dead-letters", Data: d})
}

// bulk runs a bulk redrive or discard.
func (u *UI) bulk(r *http.Request, action string, p store.DeadLetterBulkParams) (*converge.DeadLetterBulkResult, error) {
	if action == "redrive" {
		ctx, span := telemetry.StartRedrive(r.Context(), "")
		p.TraceParent = telemetry.TraceParent(ctx)
		res, err := u.store.DeadLetterRedriveMany(ctx, p)
		telemetry.EndRedrive(span, nil, err)
		return res, err
	}
	return u.store.DeadLetterDiscardMany(r.Context(), p)
}

// parseIDs parses dead-letter ids, dropping duplicates.
func parseIDs(raw []string) ([]uuid.UUID, bool) {
	seen := map[uuid.UUID]bool{}
	ids := []uuid.UUID{}
	for _, s := range raw {
		id, err := uuid.Parse(s)
		if err != nil {
			return nil, false
		}
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	return ids, true
}
