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

// bodyLimit is the largest request body any /v1 route reads.
func (s *Server) bodyLimit() int64 { return max(s.cfg.MaxPayloadBytes+envelopeBytes, maxActionBody) }

// limitBody caps every /v1 request body at bodyLimit: a declared
// Content-Length over it is answered 413 at once, without reading the body,
// and any other body is read through http.MaxBytesReader, which stops at the
// limit (handlers then answer 413) and closes the connection after the
// answer instead of draining the rest. Routes with a smaller limit wrap the
// body again.
func (s *Server) limitBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		limit := s.bodyLimit()
		if r.ContentLength > limit {
			w.Header().Set("Connection", "close")
			writeProblem(w, r, converge.Errorf(converge.ETOOLARGE, "the request body is over the limit of %d bytes", limit))
			return
		}
		if r.Body != nil && r.Body != http.NoBody {
			r.Body = http.MaxBytesReader(w, r.Body, limit)
		}
		next.ServeHTTP(w, r)
	})
}
