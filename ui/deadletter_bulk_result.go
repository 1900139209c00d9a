package ui

import "net/http"

// handleDeadLetterBulkResult shows what a bulk action did: the dead letters
// done and those skipped, with the reason.
func (u *UI) handleDeadLetterBulkResult(w http.ResponseWriter, r *http.Request) {
	f := u.takeFlash(r)
	if f == nil || f.Bulk == nil {
		http.Redirect(w, r, "/ui/dead-letters", http.StatusSeeOther)
		return
	}
	u.render(w, r, http.StatusOK, "bulk_result", &view{Title: "Bulk " + f.Bulk.Action, Nav: "dead-letters", Data: f.Bulk})
}
