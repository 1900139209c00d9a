package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/converge-run/converge"
)

// maxActionBody limits the body of operator actions.
const maxActionBody = 1 << 20

// decodeOptionalBody decodes a small JSON body into v; an empty body leaves
// v as it is. Unknown fields are rejected.
func decodeOptionalBody(w http.ResponseWriter, r *http.Request, v any) error {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxActionBody))
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return bodyTooLarge(tooBig.Limit, 0)
	}
	if err != nil {
		return converge.Errorf(converge.EMALFORMED, "could not read the request body")
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	if err := unsupportedBody(r); err != nil {
		return err
	}
	if err := checkBodyText(data); err != nil {
		return err
	}
	if _, err := decodeJSONObject(data, v); err != nil {
		return err
	}
	return refuseNulls(data)
}

// refuseNulls refuses a null where an action body (decodeOptionalBody)
// takes a value: a field, or a field of the bulk filter.
// The document types none of them nullable (a boolean dry_run, a string
// reason, an array of ids), so null is not "left out": a client that
// means that leaves the field out. data is a JSON object decodeJSONObject
// has taken.
func refuseNulls(data []byte) error {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		return nil // decodeJSONObject took it: not an object of fields
	}
	var errs []converge.FieldError
	check := func(prefix string, fields map[string]json.RawMessage) {
		for _, k := range slices.Sorted(maps.Keys(fields)) {
			if bytes.Equal(fields[k], []byte("null")) {
				errs = append(errs, converge.FieldError{Field: prefix + truncate(k, 64), Message: "must not be null; leave it out instead"})
			}
		}
	}
	check("", fields)
	var filter map[string]json.RawMessage
	if raw, ok := fields["filter"]; ok && json.Unmarshal(raw, &filter) == nil {
		check("filter.", filter)
	}
	if len(errs) > 0 {
		return &converge.AppError{Code: converge.EINVALID, Message: fieldSummary(errs), Fields: errs}
	}
	return nil
}

// decodeJSONObject decodes the JSON value at the start of data into v,
// rejecting unknown fields (a key that names a field only in another case
// too: checkFieldCase) and a second value after it, and returns the decoder
// for the caller's further checks of what follows. On a refused key v
// still holds the fields that were sent.
func decodeJSONObject(data []byte, v any) (*json.Decoder, error) {
	if bytes.Equal(bytes.TrimSpace(data), []byte("null")) {
		// The decoder would take null as an empty object.
		return nil, notObject()
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	caseErr := checkFieldCase(data, v)
	if err := dec.Decode(v); err != nil {
		if tooDeep(err) {
			return nil, deepProblem(data)
		}
		if err := decodeError(err); caseErr == nil || converge.ErrorCode(err) == converge.EMALFORMED {
			return nil, err
		}
		return nil, caseErr
	}
	if caseErr != nil {
		return nil, caseErr
	}
	if dec.More() {
		return nil, converge.Errorf(converge.EMALFORMED, "unexpected data after the JSON object")
	}
	return dec, nil
}

// notObject is the problem of a body that is JSON but not an object.
func notObject() error {
	return &converge.AppError{Code: converge.EINVALID, Message: "the body must be a JSON object",
		Fields: []converge.FieldError{{Field: "body", Message: "must be a JSON object"}}}
}

// payloadRoute reports whether r is one of the routes whose body carries a
// payload (limited by max_payload_bytes); other routes take small action
// bodies (maxActionBody).
func payloadRoute(r *http.Request) bool {
	return r.Method == http.MethodPost && (r.URL.Path == "/v1/events" || r.URL.Path == "/v1/workflow-runs")
}

// bodyLimit is the largest request body r's route reads.
func (s *Server) bodyLimit(r *http.Request) int64 {
	if payloadRoute(r) {
		return s.cfg.MaxPayloadBytes + envelopeBytes
	}
	return maxActionBody
}

// bodyTooLarge is the 413 of a body over limit; maxPayload, when not 0, is
// the configured max_payload_bytes the limit is made of, named in the
// detail.
func bodyTooLarge(limit, maxPayload int64) *converge.AppError {
	if maxPayload > 0 {
		return converge.Errorf(converge.ETOOLARGE, "the request body is over the limit of %d bytes (max_payload_bytes %d and %d for the other fields)",
			limit, maxPayload, limit-maxPayload)
	}
	return converge.Errorf(converge.ETOOLARGE, "the request body is over the limit of %d bytes", limit)
}

// limitBody caps every /v1 request body at its route's bodyLimit: a
// declared Content-Length over it is answered 413 at once, naming the
// configured limit, without reading the body, and any other body is read
// through http.MaxBytesReader, which stops at the limit (handlers then
// answer 413) and closes the connection after the answer instead of
// draining the rest.
func (s *Server) limitBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		limit := s.bodyLimit(r)
		if r.ContentLength > limit {
			w.Header().Set("Connection", "close")
			var maxPayload int64
			if payloadRoute(r) {
				maxPayload = s.cfg.MaxPayloadBytes
			}
			writeProblem(w, r, bodyTooLarge(limit, maxPayload))
			return
		}
		if r.Body != nil && r.Body != http.NoBody {
			r.Body = http.MaxBytesReader(w, r.Body, limit)
		}
		next.ServeHTTP(w, r)
	})
}

// decoderMaxDepth is how deep encoding/json nests before it gives up on a
// value ("exceeded max depth"), valid JSON though it is.
const decoderMaxDepth = 10000

// tooDeep reports whether err is the decoder giving up on a value nested
// deeper than decoderMaxDepth.
func tooDeep(err error) bool {
	var se *json.SyntaxError
	return errors.As(err, &se) && strings.HasSuffix(se.Error(), "exceeded max depth")
}

// deepProblem is the problem of a body that is valid JSON but nests deeper
// than the decoder goes (SPEC §4: 65 levels of a payload are 422
// invalid-request naming the field, not malformed JSON): the payload's
// depth message for a payload, "must be a JSON object" for a body that is
// not one, and the field nested too deep otherwise.
func deepProblem(data []byte) error {
	data = bytes.TrimSpace(data)
	if len(data) == 0 || data[0] != '{' {
		return notObject()
	}
	field := deepField(data, decoderMaxDepth)
	if field == "payload" {
		return invalid(field, fmt.Sprintf("is nested deeper than %d levels of objects and arrays", converge.MaxPayloadDepth))
	}
	return invalid(field, "is nested deeper than any value it takes")
}

// deepField is the top-level key of the JSON object data whose value is
// the first to nest deeper than limit ("body" when none is found).
func deepField(data []byte, limit int) string {
	depth, key := 0, "body"
	for i := 0; i < len(data); i++ {
		switch data[i] {
		case '{', '[':
			depth++
			if depth > limit {
				return key
			}
		case '}', ']':
			depth--
		case '"':
			j := i + 1
			for j < len(data) && data[j] != '"' {
				if data[j] == '\\' {
					j++
				}
				j++
			}
			if depth == 1 {
				// A string at the top level: a key when a colon follows.
				rest := bytes.TrimLeft(data[min(j+1, len(data)):], " \t\r\n")
				if len(rest) > 0 && rest[0] == ':' {
					var k string
					if json.Unmarshal(data[i:min(j+1, len(data))], &k) == nil {
						key = truncate(k, 64)
					}
				}
			}
			i = j
		}
	}
	return "body"
}
