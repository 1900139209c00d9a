package target

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

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
	if b, ok := req.appendJSON(make([]byte, 0, 160+len(req.Kind)+len(req.Resource)+len(req.Payload))); ok {
		return b, nil
	}
	b, err := json.Marshal(body(req))
	if err != nil {
		return nil, fmt.Errorf("encode request for run %s: %w", req.RunID, err)
	}
	return b, nil
}

// appendJSON appends the bytes json.Marshal(body(req)) makes, without its
// reflection, when they are plain to write: the kind and resource need no
// escaping, and the payload, once compacted, holds nothing json.Marshal
// would escape (<, >, &, U+2028, U+2029). Otherwise it reports false and
// encode falls back to json.Marshal (TestEncodeSameAsMarshal).
func (req Request) appendJSON(b []byte) ([]byte, bool) {
	if !plainJSONString(req.Kind) || !plainJSONString(req.Resource) {
		return b, false
	}
	b = append(b, `{"event_id":"`...)
	b = appendUUID(b, req.EventID)
	b = append(b, `","run_id":"`...)
	b = appendUUID(b, req.RunID)
	b = append(b, `","attempt":`...)
	b = strconv.AppendInt(b, int64(req.Attempt), 10)
	b = append(b, `,"kind":"`...)
	b = append(b, req.Kind...)
	b = append(b, `","resource":"`...)
	b = append(b, req.Resource...)
	b = append(b, `","version":`...)
	b = strconv.AppendInt(b, req.Version, 10)
	b = append(b, `,"payload":`...)
	if len(req.Payload) == 0 {
		b = append(b, "null"...)
	} else {
		start := len(b)
		buf := bytes.NewBuffer(b)
		if err := json.Compact(buf, req.Payload); err != nil {
			return b, false
		}
		b = buf.Bytes()
		if bytes.ContainsAny(b[start:], "<>&\u2028\u2029") {
			return b, false
		}
	}
	return append(b, '}'), true
}

// plainJSONString reports whether json.Marshal writes s as itself between
// quotes: printable ASCII without ", \\, <, > and &.
func plainJSONString(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

// appendUUID appends id in its text form, as its MarshalText writes it.
func appendUUID(b []byte, id uuid.UUID) []byte {
	var buf [36]byte
	hex.Encode(buf[0:8], id[0:4])
	buf[8] = '-'
	hex.Encode(buf[9:13], id[4:6])
	buf[13] = '-'
	hex.Encode(buf[14:18], id[6:8])
	buf[18] = '-'
	hex.Encode(buf[19:23], id[8:10])
	buf[23] = '-'
	hex.Encode(buf[24:], id[10:])
	return append(b, buf[:]...)
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
	// A body PostgreSQL's jsonb could not store as sent (invalid UTF-8,
	// which json.Valid lets through inside strings, a \u0000 or a lone
	// surrogate escape) or would grow far past it (a number like
	// 1e-9000 printed as 9,000 digits) is not kept, as a body that is not
	// JSON is not: the payloads' rules (converge.CheckPayloadJSON), so that
	// the attempt's outcome can always be written.
	if len(b) == 0 || len(b) > MaxOutputBytes || !utf8.Valid(b) || !json.Valid(b) || converge.CheckPayloadJSON(b) != "" {
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
