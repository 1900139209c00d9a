package target

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/converge-run/converge"
)

// MaxOutputBytes is the largest response body (HTTP) or standard output
// (exec) kept as a run's output. Anything larger is dropped: the call still
// succeeds, with a nil Output.
const MaxOutputBytes = 64 << 10

// ErrTimeout is wrapped by the error of a call that ran past its target's
// timeout. It deliberately does not wrap context.DeadlineExceeded, so that a
// caller checking errors.Is(err, context.DeadlineExceeded) only sees its own
// context's deadline.
var ErrTimeout = errors.New("target call timed out")

// Request is what one attempt sends to a target.
type Request struct {
	// EventID and RunID identify the event and its run. The run id is the
	// idempotency key: every attempt of a run carries the same one.
	EventID uuid.UUID
	RunID   uuid.UUID
	// Attempt is the attempt's number within the run, from 1.
	Attempt int
	// Kind, Resource and Version are the event's stream and version.
	Kind     string
	Resource string
	Version  int64
	// Payload is the event's JSON payload; nil is sent as null.
	Payload json.RawMessage
}

// body is the JSON document sent to a target: the HTTP request body, or the
// standard input of a command.
type body struct {
	EventID  uuid.UUID       `json:"event_id"`
	RunID    uuid.UUID       `json:"run_id"`
	Attempt  int             `json:"attempt"`
	Kind     string          `json:"kind"`
	Resource string          `json:"resource"`
	Version  int64           `json:"version"`
	Payload  json.RawMessage `json:"payload"`
}

// encode returns the JSON document for req. An empty payload is sent as null.
func (req Request) encode() ([]byte, error) {
	b, err := json.Marshal(body(req))
	if err != nil {
		return nil, fmt.Errorf("encode request for run %s: %w", req.RunID, err)
	}
	return b, nil
}

// Result is the result of a successful call.
type Result struct {
	// Output is the JSON the target answered with, or nil when it answered
	// nothing, something that is not JSON, or more than MaxOutputBytes.
	Output json.RawMessage
}

// Target is called once per attempt. On failure it returns a classified
// *converge.AttemptError. Cancellation of ctx aborts the call promptly and
// the returned error then wraps ctx.Err().
type Target interface {
	Call(ctx context.Context, req Request) (Result, error)
}

// Func adapts a function to the Target interface, for tests and in-process
// targets.
type Func func(ctx context.Context, req Request) (Result, error)

// Call calls f(ctx, req).
func (f Func) Call(ctx context.Context, req Request) (Result, error) { return f(ctx, req) }

var (
	_ Target = (*HTTP)(nil)
	_ Target = (*Exec)(nil)
	_ Target = Func(nil)
)

// output returns b as an output if it is JSON no larger than MaxOutputBytes,
// nil otherwise.
func output(b []byte) json.RawMessage {
	if len(b) == 0 || len(b) > MaxOutputBytes || !json.Valid(b) {
		return nil
	}
	return json.RawMessage(b)
}

// attemptError builds a classified error.
func attemptError(class converge.ErrorClass, msg string, cause error) *converge.AttemptError {
	return &converge.AttemptError{
		Err:   converge.Error{Class: class, Message: msg},
		Cause: cause,
	}
}

// canceledError is the error of a call aborted because ctx, the caller's
// context, is done. It wraps ctx.Err() and, when the context was cancelled
// with a cause, that cause too.
func canceledError(ctx context.Context, what string) *converge.AttemptError {
	err := ctx.Err()
	cause := fmt.Errorf("%s aborted: %w", what, err)
	if c := context.Cause(ctx); c != nil && !errors.Is(c, err) {
		cause = fmt.Errorf("%s aborted: %w: %w", what, err, c)
	}
	return attemptError(converge.ClassTransient, cause.Error(), cause)
}

// timeoutError is the error of a call that ran past its timeout d.
func timeoutError(what string, d time.Duration) *converge.AttemptError {
	cause := fmt.Errorf("%s: %w after %s", what, ErrTimeout, d)
	return attemptError(converge.ClassTransient, cause.Error(), cause)
}
