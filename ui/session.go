package ui

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"strings"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/store"
)

// cookieName names the session cookie.
const cookieName = "converge_session"

// formTokenField is the hidden form field that carries the session's
// form token.
const formTokenField = "csrf_token"

type sessionKey struct{}

// currentSession is the signed-in session of a request.
type currentSession struct {
	secret string
	*store.Session
}

func sessionFrom(ctx context.Context) *currentSession {
	s, _ := ctx.Value(sessionKey{}).(*currentSession)
	return s
}

// loadSession puts the request's live session, if any, and its actor into
// the context.
func (u *UI) loadSession(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := r.Cookie(cookieName)
		if err != nil || c.Value == "" {
			next.ServeHTTP(w, r)
			return
		}
		sess, err := u.store.SessionGet(r.Context(), c.Value)
		switch {
		case errors.Is(err, converge.ErrNotFound):
			// Expired, signed out or revoked: forget the cookie.
			http.SetCookie(w, u.cookie(r, "", -1))
			next.ServeHTTP(w, r)
			return
		case err != nil:
			u.serverError(w, r, err)
			return
		}
		ctx := context.WithValue(r.Context(), sessionKey{}, &currentSession{secret: c.Value, Session: sess})
		actor := sess.Actor
		ctx = converge.WithActor(ctx, &actor)
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// cookie is the session cookie carrying value; maxAge < 0 deletes it.
func (u *UI) cookie(r *http.Request, value string, maxAge int) *http.Cookie {
	return &http.Cookie{
		Name:     cookieName,
		Value:    value,
		Path:     "/ui",
		MaxAge:   maxAge,
		HttpOnly: true,
		Secure:   overTLS(r),
		SameSite: http.SameSiteStrictMode,
	}
}

// overTLS reports whether the browser reached us over HTTPS, directly or
// through a proxy that says so.
func overTLS(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}

// requireSession sends a browser without a session to the sign-in page
// (GET) or refuses the request (anything else).
func (u *UI) requireSession(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if sessionFrom(r.Context()) != nil {
			next.ServeHTTP(w, r)
			return
		}
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			if crossSiteWithoutCookie(r) {
				bounce(w, r)
				return
			}
			http.Redirect(w, r, "/ui/sign-in?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return
		}
		u.errorPage(w, r, http.StatusUnauthorized, "Signed out", "Your session has ended. Sign in again, then repeat the action.")
	})
}

// requireOperator answers 403 unless the actor is an operator: the server
// enforces what the pages only hide.
func (u *UI) requireOperator(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := converge.ActorFrom(r.Context())
		if a == nil || !a.Role.Includes(converge.RoleOperator) {
			u.errorPage(w, r, http.StatusForbidden, "Forbidden", "This needs the operator role; you are signed in as a "+string(roleOf(a))+".")
			return
		}
		next.ServeHTTP(w, r)
	})
}

func roleOf(a *converge.Actor) converge.Role {
	if a == nil {
		return ""
	}
	return a.Role
}

// requireFormToken checks the session's form token on a state-changing
// request, on top of the cross-origin check every request gets.
func (u *UI) requireFormToken(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sess := sessionFrom(r.Context())
		r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
		got := r.PostFormValue(formTokenField)
		if sess == nil || got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(sess.CSRFToken)) != 1 {
			u.errorPage(w, r, http.StatusForbidden, "Forbidden", "The form was stale or did not come from this dashboard. Go back, reload the page and try again.")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// maxFormBytes limits a form's body.
const maxFormBytes = 1 << 20

// handleCrossOrigin answers a state-changing request from another site.
func (u *UI) handleCrossOrigin(w http.ResponseWriter, r *http.Request) {
	u.errorPage(w, r, http.StatusForbidden, "Forbidden", "Cross-site requests are not allowed.")
}

// securityHeaders sets the headers every dashboard response gets.
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "same-origin")
		next.ServeHTTP(w, r)
	})
}

// crossSiteWithoutCookie reports whether r is a navigation from another
// site (a link in a chat message or an email: the notifications' links,
// SPEC §12) that came without the session cookie. The cookie is
// SameSite=Strict (SPEC §9), so the browser leaves it out of such a
// navigation even when the person is signed in.
func crossSiteWithoutCookie(r *http.Request) bool {
	if r.Header.Get("Sec-Fetch-Site") != "cross-site" || r.Header.Get("Sec-Fetch-Mode") != "navigate" {
		return false
	}
	_, err := r.Cookie(cookieName)
	return err != nil
}

// bounce answers a cross-site navigation that came without the session
// cookie with a page of this site that opens the same address again at
// once: that navigation is same-site, so the browser sends the cookie,
// and a person signed in lands on the page the link named instead of the
// sign-in form (one who is not is sent there as before). Nothing changes
// state: only GET and HEAD are bounced.
func bounce(w http.ResponseWriter, r *http.Request) {
	target := strings.ReplaceAll(r.URL.RequestURI(), "'", "%27")
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Referrer-Policy", "no-referrer")
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return
	}
	fmt.Fprintf(w, `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" content="%s"><title>converge</title></head>
<body><p><a href="%s">Continue to converge</a></p></body></html>
`, html.EscapeString("0; url='"+target+"'"), html.EscapeString(target))
}
