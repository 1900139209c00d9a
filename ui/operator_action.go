package ui

import "github.com/converge-run/converge"

// The operator actions on runs, workflow runs and streams that the stream
// and event pages show, read from the audit log by target
// (store.AuditListParams.Targets).

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

// workflowCancelAction is the audit action of an operator's cancel of a
// workflow run, which names the workflow run, not its step runs: the
// stream and event pages show it on the events that are its steps.
const workflowCancelAction = "workflow_run.cancel"

// operatorTargets is what the audit entries shown for events name: their
// runs, and the workflow runs they are steps of.
func operatorTargets(events []*converge.Event) []string {
	var targets []string
	for _, e := range events {
		for _, run := range e.Runs {
			targets = append(targets, run.ID.String())
		}
		if e.WorkflowRunID != nil {
			targets = append(targets, e.WorkflowRunID.String())
		}
	}
	return targets
}

// operatorDetail is who took action a, and why.
func operatorDetail(a *converge.AuditEntry) string {
	detail := "by " + a.Actor
	if a.Reason != "" {
		detail += ": " + a.Reason
	}
	return detail
}
