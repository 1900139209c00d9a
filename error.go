package converge

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Error codes of the application. The HTTP edge maps each to a status code
// and problem type; nothing below it knows about HTTP.
const (
	ECONFLICT        = "conflict"
	EINTERNAL        = "internal"
	EINVALID         = "invalid-request"
	ENOTFOUND        = "not-found"
	EUNAUTHORIZED    = "unauthorized"
	EFORBIDDEN       = "forbidden"
	ESTALEVERSION    = "stale-version"
	EVERSIONCONFLICT = "version-conflict"
	ERUNFINISHED     = "run-finished"
	ENOTOPEN         = "not-open"
	ESUPERSEDED      = "superseded"
	ETOOLARGE        = "payload-too-large"
	EMALFORMED       = "malformed-json"
	ENOTHELD         = "not-held"
	ENOTQUARANTINED  = "not-quarantined"
	// EKINDNOTSERVED: a dead letter of a kind that is no longer
	// configured cannot be redriven.
	EKINDNOTSERVED = "kind-not-served"
	// EBADSIGNATURE: a hook's signature is missing, wrong or too old.
	EBADSIGNATURE = "bad-signature"
	// EMAPPINGFAILED: a source rule's expression failed on a delivery.
	EMAPPINGFAILED = "mapping-failed"
	// EUNSUPPORTEDMEDIA: a body of a content type that is not accepted.
	EUNSUPPORTEDMEDIA = "unsupported-media-type"
	// EUNAVAILABLE: the database is unreachable, read-only or too slow
	// (SPEC §15); the request may succeed when tried again later.
	EUNAVAILABLE = "unavailable"
)

// FieldError names one invalid field of a request.
type FieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

// AppError is the application's error: a code, a human message and, for
// validation, the offending fields.
type AppError struct {
	Code    string
	Message string
	Fields  []FieldError
	// LatestVersion is set for stale-version errors.
	LatestVersion *int64
}

// Error implements error.
func (e *AppError) Error() string { return e.Code + ": " + e.Message }

// Errorf returns an *AppError with code and a formatted message.
func Errorf(code, format string, args ...any) *AppError {
	return &AppError{Code: code, Message: fmt.Sprintf(format, args...)}
}

// InvalidField returns the validation error (EINVALID) of one field: its
// message is "field: message", and Fields names it.
func InvalidField(field, message string) *AppError {
	return &AppError{Code: EINVALID, Message: field + ": " + message, Fields: []FieldError{{Field: field, Message: message}}}
}

// ErrorCode returns the code of the first *AppError in err's chain, or
// EINTERNAL when there is none.
func ErrorCode(err error) string {
	var e *AppError
	if errors.As(err, &e) {
		return e.Code
	}
	return EINTERNAL
}

// ErrNotFound is the sentinel for a missing entity.
var ErrNotFound = &AppError{Code: ENOTFOUND, Message: "not found"}

// ErrorClass tells whether a failed attempt may be retried.
type ErrorClass string

// Error classes. Transient is the default for an unknown error.
const (
	ClassTransient ErrorClass = "transient"
	ClassPermanent ErrorClass = "permanent"
)

// Error is the record of why an attempt or run failed, as stored and shown.
type Error struct {
	Class      ErrorClass `json:"class"`
	Message    string     `json:"message"`
	HTTPStatus *int       `json:"http_status,omitempty"`
	ExitCode   *int       `json:"exit_code,omitempty"`
}

// AttemptError is returned by a target when a call failed. RetryAfter, when
// positive, is the least delay the target asked for before the next attempt
// (an HTTP target's Retry-After header).
type AttemptError struct {
	Err        Error
	RetryAfter time.Duration
	Cause      error
}

// Error implements error.
func (e *AttemptError) Error() string { return string(e.Err.Class) + ": " + e.Err.Message }

// Unwrap returns the underlying cause.
func (e *AttemptError) Unwrap() error { return e.Cause }

// Permanent marks err as a permanent failure: it will not be retried.
func Permanent(err error) *AttemptError {
	return &AttemptError{Err: Error{Class: ClassPermanent, Message: err.Error()}, Cause: err}
}

// Transient marks err as a transient failure: it will be retried.
func Transient(err error) *AttemptError {
	return &AttemptError{Err: Error{Class: ClassTransient, Message: err.Error()}, Cause: err}
}

// ClassifyError turns any error from a target into the stored Error record.
// An error that is not an *AttemptError is transient. The duration is the
// error's RetryAfter (0 when it has none).
func ClassifyError(err error) (Error, time.Duration) {
	var ae *AttemptError
	if errors.As(err, &ae) {
		e := ae.Err
		e.Message = storableText(e.Message)
		return e, ae.RetryAfter
	}
	return Error{Class: ClassTransient, Message: storableText(err.Error())}, 0
}

// storableText is s as PostgreSQL can store it in text and jsonb: valid
// UTF-8 (each invalid byte U+FFFD) without NUL characters (each U+FFFD).
// An error's message quotes what a target sent (a response body, the end
// of a command's stderr); a NUL in it would make the attempt's outcome
// unwritable, and the run would be rescued and called again.
func storableText(s string) string {
	if utf8.ValidString(s) && !strings.ContainsRune(s, 0) {
		return s
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}
