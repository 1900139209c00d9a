package converge

import (
	"encoding/json"
	"time"

	"github.com/google/uuid"
)

// Event is a request that a stream (kind, resource) converge to Version.
// (Kind, Resource, Version) identifies an event; it is accepted at most once.
type Event struct {
	ID         uuid.UUID       `json:"id"`
	Kind       string          `json:"kind"`
	Resource   string          `json:"resource"`
	Version    int64           `json:"version"`
	Payload    json.RawMessage `json:"payload"`
	Status     RunStatus       `json:"status"`
	ReceivedAt time.Time       `json:"received_at"`
	// WorkflowRunID is the workflow run the event is a step of, if any.
	WorkflowRunID *uuid.UUID `json:"workflow_run_id"`
	Runs          []*Run     `json:"runs,omitzero"`
}

// EventSubmission is what a client asks to be accepted.
type EventSubmission struct {
	Kind     string
	Resource string
	Version  int64
	Payload  json.RawMessage
}

// EventAcceptResult is the outcome of accepting an event.
type EventAcceptResult struct {
	Event          *Event      `json:"event"`
	Run            *Run        `json:"run"`
	SupersededRuns []uuid.UUID `json:"superseded_runs"`
	// Replay is true when the event had been accepted before with an equal
	// payload; nothing was changed.
	Replay bool `json:"-"`
}

// EventListParams filters and pages a list of events.
type EventListParams struct {
	Kind     string
	Resource string
	Status   RunStatus
	Cursor   *uuid.UUID // list items strictly older than this id
	Limit    int
}
