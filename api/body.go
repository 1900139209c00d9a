package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"

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
		return converge.Errorf(converge.ETOOLARGE, "the request body is over the limit of %d bytes", tooBig.Limit)
	}
	if err != nil {
		return converge.Errorf(converge.EMALFORMED, "could not read the request body")
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	if !jsonContent(r) {
		return converge.Errorf(eUnsupportedMedia, "Content-Type must be application/json")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeError(err)
	}
	if dec.More() {
		return converge.Errorf(converge.EMALFORMED, "unexpected data after the JSON object")
	}
	return nil
}
