package ui

import (
	"net/http"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/store"
)

// handleDeadLetterBulkSubmit carries out a confirmed bulk action on the dead
// letters the confirmation listed, then shows the result (Post/Redirect/Get).
func (u *UI) handleDeadLetterBulkSubmit(w http.ResponseWriter, r *http.Request) {
	action := r.PostFormValue("action")
	if action != "redrive" && action != "discard" {
		u.errorPage(w, r, http.StatusUnprocessableEntity, "Unknown action", "Choose redrive or discard.")
		return
	}
	ids, ok := parseIDs(r.PostForm["id"])
	if !ok || len(ids) > converge.MaxDeadLetterBulk {
		u.errorPage(w, r, http.StatusUnprocessableEntity, "Invalid selection", "The selection is not a list of at most 1000 dead letter ids.")
		return
	}
	back := safeNext(r.PostFormValue("back"))
	if len(ids) == 0 {
		u.setFlash(r, flash{Kind: "error", Message: "Nothing to " + action + "."})
		http.Redirect(w, r, back, http.StatusSeeOther)
		return
	}
	res, err := u.bulk(r, action, store.DeadLetterBulkParams{IDs: ids, Kinds: u.cfg.Kinds, Audit: u.audit(r)})
	if err != nil {
		u.appError(w, r, err)
		return
	}
	b := &bulkResult{Action: action, Done: []string{}, Skipped: []bulkSkipped{}, Reason: formReason(r), Back: back}
	for _, id := range res.Done {
		b.Done = append(b.Done, id.String())
	}
	for _, s := range res.Skipped {
		b.Skipped = append(b.Skipped, bulkSkipped{ID: s.ID.String(), Reason: s.Reason})
	}
	u.setFlash(r, flash{Kind: "ok", Bulk: b})
	http.Redirect(w, r, "/ui/dead-letters/result", http.StatusSeeOther)
}
