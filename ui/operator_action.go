package ui

import "github.com/converge-run/converge"

// The operator actions on runs and streams that the stream and event pages
// show, read from the audit log by target (store.AuditListParams.Targets).

// operatorActionsPerPage bounds the operator actions a page (a stream's
// history, an event) shows.
const operatorActionsPerPage = 200

// operatorActionVerbs say what an operator action on a run did, by audit
// action: the history's line is the run's name and the verb.
var operatorActionVerbs = map[string]string{
	"run.approve": "approved",
	"run.reject":  "rejected",
	"run.cancel":  "cancelled by an operator",
}

// operatorDetail is who took action a, and why.
func operatorDetail(a *converge.AuditEntry) string {
	detail := "by " + a.Actor
	if a.Reason != "" {
		detail += ": " + a.Reason
	}
	return detail
}
