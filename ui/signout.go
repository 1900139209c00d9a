package ui

import "net/http"

func (u *UI) handleSignOut(w http.ResponseWriter, r *http.Request) {
	if sess := sessionFrom(r.Context()); sess != nil {
		if err := u.store.SessionDelete(r.Context(), sess.secret); err != nil {
			u.serverError(w, r, err)
			return
		}
	}
	http.SetCookie(w, u.cookie(r, "", -1))
	http.Redirect(w, r, "/ui/sign-in", http.StatusSeeOther)
}
