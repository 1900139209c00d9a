package ui

import (
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5/middleware"

	"github.com/converge-run/converge/api"
)

// formReason is the optional reason typed with an action, trimmed. The
// action's route has checked it (checkReason).
func formReason(r *http.Request) string { return strings.TrimSpace(r.PostFormValue("reason")) }

// checkReason refuses an action whose reason the API would refuse
// (api.CheckReason: at most 1000 characters of valid UTF-8 without NUL).
func (u *UI) checkReason(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := api.CheckReason(formReason(r)); err != nil {
			u.appError(w, r, err)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func requestID(r *http.Request) string { return middleware.GetReqID(r.Context()) }
