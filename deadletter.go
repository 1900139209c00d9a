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

// Valid reports whether r is a known dead-letter reason.
func (r DeadLetterReason) Valid() bool {
	return r == ReasonPermanentError || r == ReasonAttemptsExhausted
}

// Valid reports whether s is a known dead-letter status.
func (s DeadLetterStatus) Valid() bool {
	switch s {
	case DeadLetterOpen, DeadLetterRedriven, DeadLetterDiscarded, DeadLetterSuperseded:
		return true
	}
	return false
}

// MaxDeadLetterBulk is the most dead letters one bulk redrive or discard
// acts on.
const MaxDeadLetterBulk = 1000

// DeadLetterFilter selects dead letters. Empty fields do not filter, except
// Status, which the list treats as open.
type DeadLetterFilter struct {
	Status DeadLetterStatus
	Kind   string
	// Resource matches a prefix of the resource key.
	Resource string
	Reason   DeadLetterReason
	// Q matches a substring of any of the run's error messages,
	// case-insensitively.
	Q     string
	Since *time.Time // created at or after
	Until *time.Time // created at or before
}

// DeadLetterCursor is where a page of dead letters ends: lists are ordered
// by (created_at, id), newest first.
type DeadLetterCursor struct {
	CreatedAt time.Time
	ID        uuid.UUID
}

// DeadLetterListParams filters and pages a list of dead letters.
type DeadLetterListParams struct {
	DeadLetterFilter
	Cursor *DeadLetterCursor // list items strictly older than this
	Limit  int
}

// Skip reasons of a bulk action: why a dead letter was left alone.
const (
	SkipNotFound   = ENOTFOUND
	SkipNotOpen    = ENOTOPEN
	SkipSuperseded = ESUPERSEDED
	// SkipKindNotServed: a redrive of a dead letter whose kind is no
	// longer configured.
	SkipKindNotServed = EKINDNOTSERVED
)

// DeadLetterSkip is a dead letter a bulk action left alone, and why.
type DeadLetterSkip struct {
	ID     uuid.UUID `json:"id"`
	Reason string    `json:"reason"`
}

// DeadLetterBulkResult is the outcome of a bulk redrive or discard. More is
// set when a filter matched more dead letters than one call acts on.
type DeadLetterBulkResult struct {
	Done    []uuid.UUID      `json:"done"`
	Skipped []DeadLetterSkip `json:"skipped"`
	More    bool             `json:"more"`
	DryRun  bool             `json:"dry_run"`
}

// DeadLetterPurgeResult is the outcome of a purge of discarded dead letters.
type DeadLetterPurgeResult struct {
	Purged []uuid.UUID `json:"purged"`
	More   bool        `json:"more"`
	DryRun bool        `json:"dry_run"`
}
