package api

import (
	"bytes"
	"encoding/json"
)

// encodeJSON writes v into buf as JSON, without encoding/json's HTML
// escaping: a '<', '>' or '&' in a payload or a message is written as
// itself, not as the six bytes \u003c, so that what is returned is never
// much larger than what was sent (SPEC §4). Every API body is
// application/json or application/problem+json with nosniff, never HTML;
// the dashboard's templates do their own escaping.
func encodeJSON(buf *bytes.Buffer, v any) error {
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}
