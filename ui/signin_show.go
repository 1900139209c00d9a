package ui

import (
	"fmt"
	"net/http"
	"path"
	"strings"
	"time"
)

type signInData struct {
	Next  string
	Error string
	// TTL says how long a session lasts.
	TTL string
}

// ttlText says how long a session lasts, in words.
func (u *UI) ttlText() string {
	d := u.cfg.SessionTTL
	switch {
	case d%time.Hour == 0 && d >= 2*time.Hour:
		return fmt.Sprintf("%d hours", d/time.Hour)
	case d%time.Minute == 0 && d >= 2*time.Minute:
		return fmt.Sprintf("%d minutes", d/time.Minute)
	}
	return d.String()
}

func (u *UI) handleSignInShow(w http.ResponseWriter, r *http.Request) {
	next := safeNext(r.URL.Query().Get("next"))
	if sessionFrom(r.Context()) != nil {
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	}
	u.render(w, r, http.StatusOK, "sign_in", &view{Title: "Sign in", Data: signInData{Next: next, TTL: u.ttlText()}})
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
	// Dot segments would leave /ui/ (/ui/../x is /x): only a path that
	// is already clean is taken.
	p, _, _ := strings.Cut(next, "?")
	p, _, _ = strings.Cut(p, "#")
	if c := path.Clean(p); c != p && c+"/" != p {
		return "/ui/"
	}
	return next
}
