package converge

import (
	"encoding/json"
	"time"

	"github.com/google/uuid"
)

// DeadLetterReason says why a run failed for good.
type DeadLetterReason string

// Dead-letter reasons.
const (
	ReasonPermanentError    DeadLetterReason = "permanent_error"
	ReasonAttemptsExhausted DeadLetterReason = "attempts_exhausted"
)

// DeadLetterStatus is the state of a dead letter.
type DeadLetterStatus string

// Dead-letter statuses.
const (
	DeadLetterOpen       DeadLetterStatus = "open"
	DeadLetterRedriven   DeadLetterStatus = "redriven"
	DeadLetterDiscarded  DeadLetterStatus = "discarded"
	DeadLetterSuperseded DeadLetterStatus = "superseded"
)

// DeadLetter is the record of a run that failed for good, with its whole
// attempt history.
type DeadLetter struct {
	ID                  uuid.UUID        `json:"id"`
	EventID             uuid.UUID        `json:"event_id"`
	RunID               uuid.UUID        `json:"run_id"`
	Kind                string           `json:"kind"`
	Resource            string           `json:"resource"`
	Version             int64            `json:"version"`
	Reason              DeadLetterReason `json:"reason"`
	Attempts            int              `json:"attempts"`
	Error               *Error           `json:"error"`
	Errors              []*Error         `json:"errors"`
	Payload             json.RawMessage  `json:"payload"`
	Status              DeadLetterStatus `json:"status"`
	CreatedAt           time.Time        `json:"created_at"`
	ResolvedAt          *time.Time       `json:"resolved_at"`
	ResolvedBy          *string          `json:"resolved_by"`
	SupersededByVersion *int64           `json:"superseded_by_version,omitempty"`
}
