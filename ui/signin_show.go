package ui

import "net/http"

type signInData struct {
	Next  string
	Error string
}

func (u *UI) handleSignInShow(w http.ResponseWriter, r *http.Request) {
	next := safeNext(r.URL.Query().Get("next"))
	if sessionFrom(r.Context()) != nil {
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	}
	u.render(w, r, http.StatusOK, "sign_in", &view{Title: "Sign in", Data: signInData{Next: next}})
}

// safeNext keeps a post-sign-in destination inside the dashboard.
func safeNext(next string) string {
	if len(next) < 4 || next[:4] != "/ui/" || len(next) > 2000 {
		return "/ui/"
	}
	for _, c := range next {
		if c == '\\' || c < ' ' {
			return "/ui/"
		}
	}
	return next
}
