package converge

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/google/uuid"
)

// RunStatus is the state of a run. An event's status is that of its latest run.
type RunStatus string

// Run statuses. Succeeded, failed, superseded and cancelled are terminal.
const (
	RunQueued     RunStatus = "queued"
	RunHeld       RunStatus = "held"
	RunRunning    RunStatus = "running"
	RunRetrying   RunStatus = "retrying"
	RunSucceeded  RunStatus = "succeeded"
	RunFailed     RunStatus = "failed"
	RunSuperseded RunStatus = "superseded"
	RunCancelled  RunStatus = "cancelled"
)

// RunStatuses lists every run status, in lifecycle order.
var RunStatuses = []RunStatus{RunQueued, RunHeld, RunRunning, RunRetrying, RunSucceeded, RunFailed, RunSuperseded, RunCancelled}

// Terminal reports whether a run in status s can never change again.
func (s RunStatus) Terminal() bool {
	switch s {
	case RunSucceeded, RunFailed, RunSuperseded, RunCancelled:
		return true
	}
	return false
}

// Valid reports whether s is a known run status.
func (s RunStatus) Valid() bool {
	for _, v := range RunStatuses {
		if s == v {
			return true
		}
	}
	return false
}

// Run is one execution of an event: attempts until a terminal status.
type Run struct {
	ID      uuid.UUID `json:"id"`
	EventID uuid.UUID `json:"event_id"`
	Number  int       `json:"number"`
	Status  RunStatus `json:"status"`
	// Hold is what holds a held run (HoldApproval, HoldQuarantine); empty
	// otherwise. A held run that ended superseded or cancelled keeps it.
	Hold           []string        `json:"hold"`
	Attempts       int             `json:"attempts"`
	MaxAttempts    int             `json:"max_attempts"`
	NextAttemptAt  *time.Time      `json:"next_attempt_at"`
	CreatedAt      time.Time       `json:"created_at"`
	StartedAt      *time.Time      `json:"started_at"`
	FinishedAt     *time.Time      `json:"finished_at"`
	Error          *Error          `json:"error"`
	Output         json.RawMessage `json:"output"`
	AttemptHistory []*Attempt      `json:"attempt_history,omitzero"`
	// TraceID is the OpenTelemetry trace the run was created under (SPEC
	// §14), 32 hex digits; nil when tracing was off.
	TraceID *string `json:"trace_id"`

	// Kind, Resource and Version are the run's stream and event version;
	// they are not part of the run's JSON shape.
	Kind     string `json:"-"`
	Resource string `json:"-"`
	Version  int64  `json:"-"`
	// WorkflowRunID is the workflow run whose step the run's event is, if
	// any; not part of the run's JSON shape (the event has it).
	WorkflowRunID *uuid.UUID `json:"-"`
	// TraceParent is the W3C traceparent of the span the run was created
	// under (the accept's, the redrive request's, the workflow run's), the
	// parent of its attempt spans; empty when tracing was off. TraceLink is
	// the context a redriven run links to (the failed run's). Neither is
	// part of the run's JSON shape (TraceID is).
	TraceParent string `json:"-"`
	TraceLink   string `json:"-"`
}

// TraceIDOf returns the trace id of a W3C traceparent
// ("00-<trace id>-<span id>-<flags>"), or "" when tp is not one.
func TraceIDOf(tp string) string {
	if len(tp) < 55 || tp[2] != '-' || tp[35] != '-' || tp[52] != '-' {
		return ""
	}
	id := tp[3:35]
	for _, c := range id {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return ""
		}
	}
	if strings.Trim(id, "0") == "" {
		return ""
	}
	return id
}

// What may hold a run (Run.Hold, SPEC §11).
const (
	// HoldApproval holds a workflow step with approval until an operator
	// approves or rejects it.
	HoldApproval = "approval"
	// HoldQuarantine holds a new run of a quarantined stream until the
	// quarantine is released.
	HoldQuarantine = "quarantine"
)

// AttemptOutcome is how one call to the target ended.
type AttemptOutcome string

// Attempt outcomes.
const (
	OutcomeSucceeded      AttemptOutcome = "succeeded"
	OutcomeTransientError AttemptOutcome = "transient_error"
	OutcomePermanentError AttemptOutcome = "permanent_error"
	OutcomeCancelled      AttemptOutcome = "cancelled"
	OutcomeAbandoned      AttemptOutcome = "abandoned"
)

// Attempt is one call to the target. Outcome and FinishedAt are empty while
// the call is in flight.
type Attempt struct {
	Number     int            `json:"number"`
	Outcome    AttemptOutcome `json:"outcome"`
	StartedAt  time.Time      `json:"started_at"`
	FinishedAt *time.Time     `json:"finished_at"`
	DurationMS *int64         `json:"duration_ms"`
	Error      *Error         `json:"error"`
}

// Stream is the state of one (kind, resource) pair.
type Stream struct {
	Kind           string     `json:"kind"`
	Resource       string     `json:"resource"`
	LatestVersion  int64      `json:"latest_version"`
	AppliedVersion *int64     `json:"applied_version"`
	AppliedAt      *time.Time `json:"applied_at"`
	ActiveRun      *Run       `json:"active_run"`
	// Quarantined is set while the stream is quarantined (SPEC §11): its
	// new runs are held until a release or a success.
	Quarantined   bool       `json:"quarantined"`
	QuarantinedAt *time.Time `json:"quarantined_at"`
}

// Quarantine is a quarantined stream: since when, how many failed runs in a
// row put it there, and its latest held run, if any.
type Quarantine struct {
	Kind       string     `json:"kind"`
	Resource   string     `json:"resource"`
	Since      time.Time  `json:"since"`
	FailedRuns int        `json:"failed_runs"`
	HeldRunID  *uuid.UUID `json:"held_run_id"`
}

// QuarantineCursor is where a page of quarantined streams ends: the list is
// ordered by (since, kind, resource), newest first.
type QuarantineCursor struct {
	Since    time.Time
	Kind     string
	Resource string
}

// QuarantineListParams pages the list of quarantined streams.
type QuarantineListParams struct {
	Cursor *QuarantineCursor // list streams strictly before this
	Limit  int
}
