package ui

import (
	"net/http"
	"strings"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/store"
)

// handleSignInSubmit trades a token for a session. Submitter tokens may not
// use the dashboard: it shows dead letters and the audit trail, which is the
// viewer's business.
func (u *UI) handleSignInSubmit(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	token := strings.TrimSpace(r.PostFormValue("token"))
	next := safeNext(r.PostFormValue("next"))
	fail := func(status int, msg string) {
		u.render(w, r, status, "sign_in", &view{Title: "Sign in", Data: signInData{Next: next, Error: msg, TTL: u.ttlText()}})
	}
	if token == "" {
		fail(http.StatusUnprocessableEntity, "Enter a token.")
		return
	}
	actor, err := u.cfg.Authenticate(r.Context(), token)
	switch {
	case converge.ErrorCode(err) == converge.EUNAUTHORIZED || converge.ErrorCode(err) == converge.ENOTFOUND:
		fail(http.StatusUnauthorized, "That token is not valid.")
		return
	case err != nil:
		u.serverError(w, r, err)
		return
	case !actor.Role.Includes(converge.RoleViewer):
		fail(http.StatusForbidden, "The dashboard needs a viewer or operator token; this one is a "+string(actor.Role)+" token.")
		return
	}
	if old := sessionFrom(r.Context()); old != nil {
		_ = u.store.SessionDelete(r.Context(), old.secret)
	}
	secret, _, err := u.store.SessionCreate(r.Context(), store.SessionCreateParams{Actor: *actor, Token: token, TTL: u.cfg.SessionTTL})
	if err != nil {
		u.serverError(w, r, err)
		return
	}
	u.log.Info("dashboard sign-in", "actor", actor.Name, "role", actor.Role)
	http.SetCookie(w, u.cookie(r, secret, int(u.cfg.SessionTTL.Seconds())))
	http.Redirect(w, r, next, http.StatusSeeOther)
}
