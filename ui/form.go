package ui

import (
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5/middleware"
)

// maxReasonLen limits the reason an operator gives for an action.
const maxReasonLen = 500

// formReason is the optional reason typed with an action, trimmed and cut
// to maxReasonLen.
func formReason(r *http.Request) string {
	s := strings.TrimSpace(r.PostFormValue("reason"))
	if rs := []rune(s); len(rs) > maxReasonLen {
		s = string(rs[:maxReasonLen])
	}
	return s
}

func requestID(r *http.Request) string { return middleware.GetReqID(r.Context()) }
