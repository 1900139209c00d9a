package source

import (
	"encoding/json"
	"errors"
	"strings"
	"unicode/utf8"

	"github.com/converge-run/converge"
)

// decodeBody decodes a delivery's JSON body (or a binary-mode CloudEvent's
// data) into v, as the rules read it. A body that is not JSON is
// malformed-json (400). One that decoding would silently change or could
// not hold is 422 invalid-request naming body, as POST /v1/events refuses
// such a payload (SPEC §4): text that is not valid UTF-8 or has a lone
// UTF-16 surrogate escape (the decoder would read U+FFFD in its place), or
// a number beyond a double (1e400).
func decodeBody(body []byte, v any) error {
	if err := json.Unmarshal(body, v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && strings.HasPrefix(te.Value, "number") {
			return invalidBody("has a number beyond a double's range (" + te.Value + ")")
		}
		return malformed(err)
	}
	if !utf8.Valid(body) {
		return invalidBody("must be valid UTF-8")
	}
	if converge.HasLoneSurrogate(body) {
		return invalidBody("must not contain a lone UTF-16 surrogate escape")
	}
	return nil
}

// invalidBody is the 422 of a JSON body the rules cannot read as sent.
func invalidBody(msg string) error {
	return invalidEvent("body", "the body "+msg, msg)
}
