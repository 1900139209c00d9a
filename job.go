package converge

import (
	"encoding/json"
	"time"

	"github.com/google/uuid"
)

// RunArgs is the River job that drives one run. The job carries only the
// run's id; everything else is read from converge's tables when it is
// worked.
type RunArgs struct {
	RunID uuid.UUID `json:"run_id"`
}

// Kind implements River's JobArgs.
func (RunArgs) Kind() string { return "converge_run" }

// RunJobMaxAttempts is the River-level attempt ceiling of a run's job (and
// River's default). River never decides that a run has failed: the run's
// attempt count does, and snoozes (waiting for the lease, backoff) do not
// count with River either.
const RunJobMaxAttempts = 100_000

// Decision is what a worker must do with a run's job.
type Decision int

// Decisions of beginning an attempt.
const (
	// DecisionDone: the run needs nothing more from this job (it is
	// finished, superseded, or driven by a newer job).
	DecisionDone Decision = iota
	// DecisionWait: another attempt of the stream is in flight, or the
	// run's first attempt is held back; try again after Wait (a finishing
	// holder wakes the job earlier).
	DecisionWait
	// DecisionCall: the attempt is recorded and the lease is ours; call the
	// target.
	DecisionCall
)

// AttemptTicket is the answer to beginning an attempt.
type AttemptTicket struct {
	Decision Decision
	Wait     time.Duration
	Run      *Run
	Payload  json.RawMessage
	Attempt  int
	// LeaseFrom is a moment of this process's clock no later than the
	// database's start of the lease (the transaction's now()): the lease
	// lasts at least its TTL from LeaseFrom. It is read after a connection
	// was acquired, so waiting for the pool does not shorten it.
	LeaseFrom time.Time
}
