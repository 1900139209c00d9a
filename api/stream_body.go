package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"unicode/utf8"

	"github.com/converge-run/converge"
)

// The bodies of POST /v1/events and POST /v1/workflow-runs: one JSON object
// naming what to run (a kind, a workflow) and the stream's fields, resource,
// version and payload, read and checked the same way for both.

// decodeStrictJSON reads body (a request body limited to maxPayload plus
// room by http.MaxBytesReader) into dst: valid UTF-8, one JSON object, no
// unknown fields, nothing after it. Every failure is a problem of its own
// (EMALFORMED, or ETOOLARGE for a body over the limit). On an EINVALID
// (a field of the wrong type, an unknown field, text that is not valid
// UTF-8) dst still holds the fields that were sent.
func decodeStrictJSON(body io.Reader, maxPayload int64, dst any) error {
	data, err := io.ReadAll(body)
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return bodyTooLarge(tooBig.Limit, maxPayload)
	}
	if err != nil {
		return converge.Errorf(converge.EMALFORMED, "could not read the request body")
	}
	// Text that is not valid UTF-8 (or a lone surrogate escape, which
	// the decoder would turn into U+FFFD) is 422 naming its field; the
	// payload's own check refuses the rest of what it cannot hold. The
	// walk is skipped for the usual body, which has neither.
	valid := utf8.Valid(data)
	if !valid || hasSurrogateEscape(data) {
		if err := checkBodyText(data, "payload"); err != nil {
			// The body is still read into dst, leniently (bad text
			// replaced by U+FFFD), for what the caller tells of a
			// refusal: the kind converge_events_rejected_total counts
			// it under. A kind that is itself the bad text names no
			// configured kind (kinds are a-z 0-9 _ -).
			_ = json.Unmarshal(data, dst)
			return err
		}
	}
	if !valid {
		// Not even JSON.
		return converge.Errorf(converge.EMALFORMED, "the request body is not valid UTF-8")
	}
	dec, err := decodeJSONObject(data, dst)
	if err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return converge.Errorf(converge.EMALFORMED, "unexpected data after the JSON object")
	}
	return nil
}

// hasSurrogateEscape reports whether data holds the escape of a lone UTF-16
// surrogate (a \uD800–\uDBFF escape not followed at once by a
// \uDC00–\uDFFF one, or a low half alone), or something that looks like
// one, in one pass: escaped pairs and the other \uD… escapes (Hangul) are
// ordinary text and start no walk.
func hasSurrogateEscape(data []byte) bool {
	for {
		i := bytes.Index(data, []byte(`\u`))
		if i < 0 {
			return false
		}
		switch surrogateHalf(data[i:]) {
		case 'h':
			// A high half is fine followed at once by a low one (an
			// escaped pair: an emoji, as Python's json.dumps writes it).
			if surrogateHalf(data[i+6:]) != 'l' {
				return true
			}
			data = data[i+12:]
		case 'l':
			return true // a low half with no high one before it
		default:
			data = data[i+2:]
		}
	}
}

// surrogateHalf says whether p starts with the escape of a UTF-16
// surrogate: 'h' for a high half (\uD800–\uDBFF), 'l' for a low one
// (\uDC00–\uDFFF), 0 for anything else. Escaped backslashes are not
// told apart (`\\uD800` is text): a false alarm only costs the walk.
func surrogateHalf(p []byte) byte {
	if len(p) < 6 || p[0] != '\\' || p[1] != 'u' || (p[2] != 'd' && p[2] != 'D') {
		return 0
	}
	switch p[3] {
	case '8', '9', 'a', 'A', 'b', 'B':
		return 'h'
	case 'c', 'C', 'd', 'D', 'e', 'E', 'f', 'F':
		return 'l'
	}
	return 0
}

// fieldErrors gathers the problems of a body's fields, reported together
// as one EINVALID.
type fieldErrors []converge.FieldError

func (f *fieldErrors) add(field, msg string) {
	*f = append(*f, converge.FieldError{Field: field, Message: msg})
}

// err is the EINVALID of the problems gathered, or nil when there are none.
func (f fieldErrors) err() error {
	if len(f) == 0 {
		return nil
	}
	return &converge.AppError{Code: converge.EINVALID, Message: fieldSummary(f), Fields: f}
}

// streamFields checks a body's resource, version and payload, adding each
// field's problem to fields, and returns their values (the payload {} when
// absent). The error is a problem of its own that ends the request at once
// (ETOOLARGE for a payload over maxPayload).
func streamFields(resource *string, version, payload json.RawMessage, maxPayload int64, fields *fieldErrors) (string, int64, json.RawMessage, error) {
	var res string
	if resource == nil {
		fields.add("resource", "is required")
	} else if err := converge.ValidateResource(*resource); err != nil {
		fields.add("resource", err.Error())
	} else {
		res = *resource
	}
	v, msg := parseVersion(version)
	if msg != "" {
		fields.add("version", msg)
	}
	p, msg, err := decodePayload(payload, maxPayload)
	if err != nil {
		return "", 0, nil, err
	}
	if msg != "" {
		fields.add("payload", msg)
	}
	return res, v, p, nil
}
