package api

import "github.com/converge-run/converge"

// Payload limits (SPEC §4 "Limits on input"): converge's own
// (payload.go in the root package), which the rules of event sources are
// held to as well.
const (
	// MaxPayloadDepth is the deepest nesting of objects and arrays a
	// payload may have; the payload object itself is depth 1.
	MaxPayloadDepth = converge.MaxPayloadDepth
	// MaxNumberChars is the longest plain decimal form (as PostgreSQL's
	// jsonb prints a number: no exponent) a payload number may have.
	MaxNumberChars = converge.MaxNumberChars
)

// CheckPayloadJSON checks a payload that is already known to be one valid
// JSON value (converge.CheckPayloadJSON): nesting, numbers and strings
// PostgreSQL's jsonb can store. It returns the problem as a message for
// the payload field, or "".
func CheckPayloadJSON(p []byte) string { return converge.CheckPayloadJSON(p) }

// scanString reads the JSON string at the start of p and returns its
// length in bytes, or a message when PostgreSQL could not store it.
func scanString(p []byte) (int, string) { return converge.ScanPayloadString(p) }
