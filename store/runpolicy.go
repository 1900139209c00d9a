package store

import "github.com/converge-run/converge"

// The run policy of a new run comes from its kind's configuration in one
// place, so that the entry points that accept runs (POST /v1/events, POST
// /v1/workflow-runs and /hooks) cannot differ in what they keep on a run:
// a run accepted without its kind's quarantine_after never quarantines its
// stream (SPEC §11).

// StepPolicyOf returns the run policy a new run of kind k is accepted
// with: its max_attempts, debounce and quarantine_after.
func StepPolicyOf(k converge.KindPolicy) StepPolicy {
	return StepPolicy{MaxAttempts: k.MaxAttempts, Debounce: k.Debounce, QuarantineAfter: k.QuarantineAfter}
}

// StepPolicies returns the run policy of every kind of def's steps, by
// kind, as WorkflowRunStartParams.Policies takes them.
func StepPolicies(def *converge.Workflow, kinds converge.KindPolicies) map[string]StepPolicy {
	pols := make(map[string]StepPolicy, len(def.Steps))
	for _, st := range def.Steps {
		pols[st.Kind] = StepPolicyOf(kinds[st.Kind])
	}
	return pols
}

// NewEventAcceptParams returns the parameters that accept sub with the run
// policy of its kind k, its run created under traceParent.
func NewEventAcceptParams(sub converge.EventSubmission, k converge.KindPolicy, traceParent string) EventAcceptParams {
	pol := StepPolicyOf(k)
	return EventAcceptParams{
		EventSubmission: sub, MaxAttempts: pol.MaxAttempts, Debounce: pol.Debounce, QuarantineAfter: pol.QuarantineAfter,
		TraceParent: traceParent,
	}
}
