package api

import (
	"context"
	"net/http"

	"github.com/google/uuid"
)

// serveGet answers a GET of one resource by its id path parameter: get
// reads it and it is written as it is (200), or the problem of the error
// (a malformed id is not found, as pathID says).
func serveGet[T any](s *Server, w http.ResponseWriter, r *http.Request, get func(context.Context, uuid.UUID) (T, error)) {
	id, err := pathID(r, "id")
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	v, err := get(r.Context(), id)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, v)
}

// serveList answers a GET of a cursor-paginated list: parse reads the
// request's query, list reads the page, and the items and the next
// cursor are written as a listPage (200), or the problem of the error.
func serveList[P, T any](s *Server, w http.ResponseWriter, r *http.Request, parse func(*http.Request) (P, error),
	list func(context.Context, P) ([]T, *uuid.UUID, error)) {
	p, err := parse(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	items, next, err := list(r.Context(), p)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, newPage(items, next))
}
