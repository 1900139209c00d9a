package converge

import (
	"strconv"
	"time"

	"github.com/google/uuid"
)

// The notification types (SPEC §12): what a receiver subscribes to in its
// `on` list.
const (
	NotifyDeadLetterCreated = "dead_letter.created"
	NotifyWorkflowRunFailed = "workflow_run.failed"
	NotifyRunHeld           = "run.held"
	NotifyStreamQuarantined = "stream.quarantined"
)

// NotificationTypes are the notification types, in the order SPEC §12
// lists them.
var NotificationTypes = []string{NotifyDeadLetterCreated, NotifyWorkflowRunFailed, NotifyRunHeld, NotifyStreamQuarantined}

// NotificationQueue is the River queue of the notifications to receiver
// i ("0-notifications"): a queue per receiver, so that a slow receiver
// never delays another's notifications. It starts with a digit, which no
// kind's queue does.
func NotificationQueue(receiver int) string { return strconv.Itoa(receiver) + "-notifications" }

// NotifyRoute is what the store needs of one configured receiver of
// notifications to enqueue them: the types it wants and the attempts a
// notification to it gets. Receivers are numbered by their position in
// the configuration (NotificationArgs.Receiver).
type NotifyRoute struct {
	On          []string
	MaxAttempts int
}

// Wants reports whether the route subscribes to notification type typ.
func (r NotifyRoute) Wants(typ string) bool {
	for _, t := range r.On {
		if t == typ {
			return true
		}
	}
	return false
}

// NotificationArgs is the River job of one notification to one receiver,
// inserted in the transaction of its cause. Its ID is the notification's
// webhook-id, the same on every retry.
type NotificationArgs struct {
	ID       uuid.UUID `json:"id"`
	Receiver int       `json:"receiver"`
	Type     string    `json:"type"`
	// At is when the cause happened (the transaction's time).
	At      time.Time           `json:"at"`
	Subject NotificationSubject `json:"subject"`
}

// Kind implements River's JobArgs.
func (NotificationArgs) Kind() string { return "converge_notification" }

// NotificationSubject is what a notification is about: a dead letter, a
// workflow run, a held run or a quarantined stream, with the stream and
// version it concerns.
type NotificationSubject struct {
	// ID is the dead letter's, the workflow run's or the run's id (for
	// stream.quarantined: the run whose failure quarantined the stream).
	ID       uuid.UUID `json:"id"`
	Kind     string    `json:"kind"`
	Resource string    `json:"resource"`
	Version  int64     `json:"version"`
	// Workflow is the workflow's name (workflow_run.failed).
	Workflow string `json:"workflow,omitempty"`
	// RunID and EventID are the run and event concerned, when there is one.
	RunID   *uuid.UUID `json:"run_id,omitempty"`
	EventID *uuid.UUID `json:"event_id,omitempty"`
	// Hold is what holds the run (run.held).
	Hold []string `json:"hold,omitempty"`
	// Reason is the dead letter's reason; Error the failure's message.
	Reason string `json:"reason,omitempty"`
	Error  string `json:"error,omitempty"`
	// QuarantinedAt is when the stream was quarantined
	// (stream.quarantined): a later quarantine is another subject.
	QuarantinedAt *time.Time `json:"quarantined_at,omitempty"`
}
