package telemetry

import (
	"slices"

	"github.com/converge-run/converge"
)

// Folded label values: what a value outside its label's set becomes.
const (
	// UnknownLabel replaces a kind, workflow or source that is not configured.
	UnknownLabel = "unknown"
	// OtherLabel replaces a reason, outcome, status or table outside its set.
	OtherLabel = "other"
)

// Sources of accepted events besides the configured event sources.
const (
	// SourceAPI is the source of events submitted to POST /v1/events.
	SourceAPI = "api"
	// SourceWorkflow is the source of events accepted as workflow steps.
	SourceWorkflow = "workflow"
)

// Labels are the configured names that metrics are exported for from
// start-up, each at zero.
type Labels struct {
	// Kinds are the configured kinds.
	Kinds []string
	// Workflows are the configured workflows' names.
	Workflows []string
	// Sources are the configured event sources' names. SourceAPI and
	// SourceWorkflow are always added for accepted events.
	Sources []string
}

// RunStatuses are the values of converge_runs' status label: every run
// status of SPEC §2, the unfinished ones and the terminal ones, in
// lifecycle order (converge.RunStatuses).
var RunStatuses = func() []string {
	out := make([]string, len(converge.RunStatuses))
	for i, s := range converge.RunStatuses {
		out[i] = string(s)
	}
	return out
}()

// AttemptOutcomes are the values of converge_attempts_total's outcome label.
var AttemptOutcomes = []string{
	string(converge.OutcomeSucceeded),
	string(converge.OutcomeTransientError),
	string(converge.OutcomePermanentError),
	string(converge.OutcomeCancelled),
	string(converge.OutcomeAbandoned),
}

// RejectReasons are the values of converge_events_rejected_total's reason
// label: the problem slugs of SPEC §4 (the application's error codes and
// those of the HTTP edge) a refused submission can have, POST /v1/events
// and POST /hooks/{source} alike (bad-signature, mapping-failed).
var RejectReasons = []string{
	converge.EINVALID,
	converge.EMALFORMED,
	converge.ETOOLARGE,
	"headers-too-large",
	"unsupported-media-type",
	"method-not-allowed",
	"rate-limited",
	converge.EUNAUTHORIZED,
	converge.EFORBIDDEN,
	converge.ENOTFOUND,
	converge.ECONFLICT,
	converge.ESTALEVERSION,
	converge.EVERSIONCONFLICT,
	converge.ERUNFINISHED,
	converge.ENOTOPEN,
	converge.ESUPERSEDED,
	converge.EBADSIGNATURE,
	converge.EMAPPINGFAILED,
	converge.EUNAVAILABLE,
	converge.EINTERNAL,
}

// WorkflowRunStatuses are the values of converge_workflow_runs_total's
// status label.
var WorkflowRunStatuses = []string{"running", "waiting", "succeeded", "failed", "superseded", "cancelled"}

// DeliveryStatuses are the values of converge_deliveries_total's status
// label: what became of a call to an event source's endpoint.
var DeliveryStatuses = []string{"accepted", "ignored", "rejected"}

// NotificationOutcomes are the values of converge_notifications_total's
// outcome label: delivered, given up after its retries, or dropped because
// a newer notification made it obsolete.
var NotificationOutcomes = []string{"sent", "failed", "obsolete"}

// PrunedTables are the values of converge_pruned_rows_total's table label.
var PrunedTables = []string{"events", "runs", "attempts", "dead_letters", "deliveries", "audit", "workflow_runs"}

// labelSet is a label's allowed values and what any other value becomes.
type labelSet struct {
	values   []string
	fallback string
}

func newLabelSet(fallback string, groups ...[]string) labelSet {
	var vs []string
	for _, g := range groups {
		for _, v := range g {
			if v != "" && !slices.Contains(vs, v) {
				vs = append(vs, v)
			}
		}
	}
	return labelSet{values: vs, fallback: fallback}
}

// fold returns v when it is in the set, the fallback otherwise. The sets
// are small (tens of values), so a linear search beats a map's hashing.
func (s labelSet) fold(v string) string {
	if slices.Contains(s.values, v) {
		return v
	}
	return s.fallback
}
