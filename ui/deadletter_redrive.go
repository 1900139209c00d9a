package ui

import (
	"fmt"
	"net/http"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/api"
	"github.com/converge-run/converge/store"
	"github.com/converge-run/converge/telemetry"
)

// handleDeadLetterRedrive starts a new run of one dead letter's event.
func (u *UI) handleDeadLetterRedrive(w http.ResponseWriter, r *http.Request) {
	id, err := uuid.Parse(chi.URLParam(r, "id"))
	if err != nil {
		u.handleNotFound(w, r)
		return
	}
	ctx, span := telemetry.StartRedrive(r.Context(), id.String())
	run, err := u.store.DeadLetterRedrive(ctx, store.DeadLetterRedriveParams{
		ID: id, Kinds: u.cfg.Kinds, Audit: u.audit(r), TraceParent: telemetry.TraceParent(ctx),
	})
	telemetry.EndRedrive(span, run, err)
	u.afterAction(w, r, "/ui/dead-letters/"+id.String(), err, func() string {
		if run.Status == converge.RunHeld {
			// A redrive into a quarantined stream is accepted held.
			return fmt.Sprintf("Redriven: run #%d is held for %s.", run.Number, strings.Join(run.Hold, " and "))
		}
		return fmt.Sprintf("Redriven: run #%d is queued.", run.Number)
	})
}

// audit is the audit entry of the request's actor, with the form's reason.
func (u *UI) audit(r *http.Request) converge.AuditEntry {
	e := converge.AuditEntry{Reason: formReason(r), RequestID: requestID(r)}
	if sess := sessionFrom(r.Context()); sess != nil {
		e.Actor, e.Role = sess.Actor.Name, string(sess.Actor.Role)
	}
	return e
}

// afterAction finishes a single action with Post/Redirect/Get: a flash with
// the outcome, then a redirect to back. Conflicts (not open, superseded,
// finished) are shown as an error flash; a missing target is a 404.
func (u *UI) afterAction(w http.ResponseWriter, r *http.Request, back string, err error, ok func() string) {
	switch status := api.ErrorStatus(err); {
	case err == nil:
		u.setFlash(r, flash{Kind: "ok", Message: ok()})
	case status == http.StatusNotFound:
		u.appError(w, r, err)
		return
	case status >= http.StatusInternalServerError:
		u.serverError(w, r, err)
		return
	default:
		u.setFlash(r, flash{Kind: "error", Message: sentence(appMessage(err))})
	}
	http.Redirect(w, r, back, http.StatusSeeOther)
}

// sentence is msg as a flash shows it: its first letter upper-case and a
// full stop at its end ("run is already finished" reads "Run is already
// finished.").
func sentence(msg string) string {
	if msg == "" {
		return msg
	}
	r, n := utf8.DecodeRuneInString(msg)
	msg = string(unicode.ToUpper(r)) + msg[n:]
	if !strings.HasSuffix(msg, ".") {
		msg += "."
	}
	return msg
}
