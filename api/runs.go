package api

import (
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/store"
)

// auditFor returns the audit fields of the request's actor.
func auditFor(r *http.Request, reason string) store.AuditEntry {
	a := ActorFrom(r.Context())
	e := store.AuditEntry{Reason: reason, RequestID: requestID(r)}
	if a != nil {
		e.Actor, e.Role = a.Name, string(a.Role)
	}
	return e
}

func (s *Server) handleRunCancel(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "id")
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	var body struct {
		Reason string `json:"reason"`
	}
	if err := decodeOptionalBody(w, r, &body); err != nil {
		s.writeError(w, r, err)
		return
	}
	run, err := s.store.RunCancel(r.Context(), id, auditFor(r, body.Reason))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, run)
}

func (s *Server) handleResourceGet(w http.ResponseWriter, r *http.Request) {
	kind := chi.URLParam(r, "kind")
	resource := strings.TrimPrefix(chi.URLParam(r, "*"), "/")
	if err := converge.ValidateResource(resource); err != nil || !utf8.ValidString(kind) || strings.ContainsRune(kind, 0) {
		s.writeError(w, r, converge.Errorf(converge.ENOTFOUND, "no resource %q of kind %q", truncate(resource, 64), truncate(kind, 64)))
		return
	}
	st, err := s.store.StreamGet(r.Context(), kind, resource)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, st)
}

func (s *Server) handleAuditList(w http.ResponseWriter, r *http.Request) {
	if err := queryParams(r, "cursor", "limit"); err != nil {
		s.writeError(w, r, err)
		return
	}
	cursor, err := DecodeCursor(r.URL.Query().Get("cursor"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	limit, err := ParseLimit(r.URL.Query().Get("limit"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	items, next, err := s.store.AuditList(r.Context(), store.AuditListParams{Cursor: cursor, Limit: limit})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, newPage(items, next))
}
