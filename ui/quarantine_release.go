package ui

import (
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/converge-run/converge"
)

// handleQuarantineRelease releases a quarantined stream
// (/ui/quarantine/{kind}/{resource}/release), then returns to the page the
// form was on.
func (u *UI) handleQuarantineRelease(w http.ResponseWriter, r *http.Request) {
	kind := chi.URLParam(r, "kind")
	resource, ok := strings.CutSuffix(strings.TrimPrefix(chi.URLParam(r, "*"), "/"), "/release")
	if !ok || !strings.HasSuffix(r.URL.EscapedPath(), "/release") || converge.ValidateKind(kind) != nil || converge.ValidateResource(resource) != nil {
		u.handleNotFound(w, r)
		return
	}
	back := safeNext(r.PostFormValue("back"))
	_, err := u.store.QuarantineRelease(r.Context(), kind, resource, u.audit(r))
	u.afterAction(w, r, back, err, func() string { return "Quarantine of " + kind + " " + resource + " released." })
}
