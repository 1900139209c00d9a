package ui

import (
	"encoding/json"
	"net/http"
)

// flash is a message carried across a redirect (Post/Redirect/Get) in the
// session.
type flash struct {
	// Kind is "ok" or "error".
	Kind    string      `json:"kind"`
	Message string      `json:"message"`
	Bulk    *bulkResult `json:"bulk,omitempty"`
}

// bulkResult is the outcome of a bulk action, shown on the result page.
type bulkResult struct {
	Action  string        `json:"action"`
	Done    []string      `json:"done"`
	Skipped []bulkSkipped `json:"skipped"`
	Reason  string        `json:"reason,omitempty"`
	// Back is the list the action started from.
	Back string `json:"back"`
}

type bulkSkipped struct {
	ID     string `json:"id"`
	Reason string `json:"reason"`
}

// setFlash keeps f for the session's next page. A failure is logged: the
// action itself has been done.
func (u *UI) setFlash(r *http.Request, f flash) {
	sess := sessionFrom(r.Context())
	if sess == nil {
		return
	}
	b, err := json.Marshal(f)
	if err == nil {
		err = u.store.SessionFlashSet(r.Context(), sess.secret, b)
	}
	if err != nil {
		u.log.Error("set flash", "error", err)
	}
}

// takeFlash returns and clears the session's flash, nil when there is none.
func (u *UI) takeFlash(r *http.Request) *flash {
	sess := sessionFrom(r.Context())
	if sess == nil {
		return nil
	}
	b, err := u.store.SessionFlashTake(r.Context(), sess.secret)
	if err != nil {
		u.log.Error("take flash", "error", err)
		return nil
	}
	if b == nil {
		return nil
	}
	var f flash
	if err := json.Unmarshal(b, &f); err != nil {
		return nil
	}
	return &f
}
