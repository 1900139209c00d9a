package converge

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
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

// NotifyReceiverKey is the stable key of the receiver of notifications
// posted to url in format: 15 decimal digits of the SHA-256 of the two
// (a notification job names its receiver by it, so that reordering the
// configured receivers sends no queued notification to another one). It
// holds nothing of the URL, whose path or query may be a credential.
// Receivers that share url and format are told apart by nth, their rank
// among them (0 for the first).
func NotifyReceiverKey(url, format string, nth int) string {
	sum := sha256.Sum256([]byte(url + "\x00" + format))
	key := fmt.Sprintf("%015d", binary.BigEndian.Uint64(sum[:8])%1e15)
	if nth > 0 {
		key += fmt.Sprintf("-%d", nth+1)
	}
	return key
}

// NotificationQueue is the River queue of the notifications to the
// receiver of key ("<key>-notifications"): a queue per receiver, so that a
// slow receiver never delays another's notifications. It starts with a
// digit, which no kind's queue does.
func NotificationQueue(key string) string { return key + "-notifications" }

// NotifyRoute is what the store needs of one configured receiver of
// notifications to enqueue them: its key (NotifyReceiverKey) and its URL
// as logs show it (scheme and host), the types it wants and the attempts
// a notification to it gets.
type NotifyRoute struct {
	Key         string
	Shown       string
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
	ID uuid.UUID `json:"id"`
	// Receiver is the key of its receiver (NotifyReceiverKey);
	// ReceiverURL its URL as logs show it (scheme and host only), to name
	// it when the configuration no longer has it.
	Receiver    string `json:"receiver_key"`
	ReceiverURL string `json:"receiver_url"`
	Type        string `json:"type"`
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
	// Workflow is the workflow's name and Step the name of its step that
	// failed (workflow_run.failed, whose Kind is that step's kind and
	// Resource and Version the workflow run's).
	Workflow string `json:"workflow,omitempty"`
	Step     string `json:"step,omitempty"`
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
