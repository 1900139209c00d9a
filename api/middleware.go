package api

import (
	"context"
	"net/http"

	"github.com/go-chi/chi/v5/middleware"
	"github.com/google/uuid"

	"github.com/converge-run/converge"
)

// MaxRequestIDLen is the longest X-Request-Id a request may bring.
const MaxRequestIDLen = 128

// MaxHeaderBytes is the most request headers (the request line and every
// header line) a request may have: over it the answer is 431
// headers-too-large. The http.Server must allow more than this (cmd sets
// its MaxHeaderBytes to ServerMaxHeaderBytes) so that the check here, with
// its problem body, is the one that answers.
const MaxHeaderBytes = 64 << 10

// ServerMaxHeaderBytes is the http.Server's MaxHeaderBytes: well above
// MaxHeaderBytes, so that only a request far past the limit gets net/http's
// plain 431.
const ServerMaxHeaderBytes = 1 << 20

// eHeadersTooLarge is the problem slug of 431.
const eHeadersTooLarge = "headers-too-large"

// ValidRequestID reports whether id may be used as a request id: 1 to
// MaxRequestIDLen characters of [A-Za-z0-9._:-].
func ValidRequestID(id string) bool {
	if id == "" || len(id) > MaxRequestIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		switch c := id[i]; {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '_', c == ':', c == '-':
		default:
			return false
		}
	}
	return true
}

// RequestID gives every request an id, in its context (chi's
// middleware.GetReqID reads it) and in the X-Request-Id header of the
// answer: the X-Request-Id the request sent when ValidRequestID accepts
// it, otherwise a new UUID. The dashboard, mounted beside the API, uses it
// too, so that both log and audit the same ids; a request that already has
// an id (RequestID ran further out) keeps it.
func RequestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if middleware.GetReqID(r.Context()) != "" {
			next.ServeHTTP(w, r)
			return
		}
		id := r.Header.Get("X-Request-Id")
		if !ValidRequestID(id) {
			id = newRequestID()
		}
		w.Header().Set("X-Request-Id", id)
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), middleware.RequestIDKey, id)))
	})
}

func newRequestID() string {
	if id, err := uuid.NewV7(); err == nil {
		return id.String()
	}
	return uuid.NewString()
}

// headerBytes is the size of r's request line and header lines as sent.
func headerBytes(r *http.Request) int {
	n := len(r.Method) + 1 + len(r.RequestURI) + 1 + len(r.Proto) + 2
	if r.Host != "" && r.Header.Get("Host") == "" {
		n += len("Host: ") + len(r.Host) + 2
	}
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + 2 + len(v) + 2
		}
	}
	return n
}

// LimitHeaders answers 431 headers-too-large, before any handler, to a
// request whose headers are over MaxHeaderBytes.
func LimitHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if headerBytes(r) > MaxHeaderBytes {
			w.Header().Set("Connection", "close")
			writeProblem(w, r, converge.Errorf(eHeadersTooLarge, "the request headers are over the limit of %d bytes", MaxHeaderBytes))
			return
		}
		next.ServeHTTP(w, r)
	})
}
