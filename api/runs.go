package api

import (
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"

	"github.com/converge-run/converge"
)

// auditFor returns the audit fields of the request's actor.
func auditFor(r *http.Request, reason string) converge.AuditEntry {
	a := converge.ActorFrom(r.Context())
	e := converge.AuditEntry{Reason: reason, RequestID: requestID(r)}
	if a != nil {
		e.Actor, e.Role = a.Name, string(a.Role)
	}
	return e
}

// actionRequest reads what every operator action on one item takes: the
// item's id from the path and an optional {"reason"} body, checked, as the
// audit entry of the request's actor.
func (s *Server) actionRequest(w http.ResponseWriter, r *http.Request) (uuid.UUID, converge.AuditEntry, error) {
	id, err := pathID(r, "id")
	if err != nil {
		return uuid.Nil, converge.AuditEntry{}, err
	}
	var body struct {
		Reason string `json:"reason"`
	}
	if err := decodeOptionalBody(w, r, &body); err != nil {
		return uuid.Nil, converge.AuditEntry{}, err
	}
	if err := CheckReason(body.Reason); err != nil {
		return uuid.Nil, converge.AuditEntry{}, err
	}
	return id, auditFor(r, body.Reason), nil
}

func (s *Server) handleRunCancel(w http.ResponseWriter, r *http.Request) {
	id, audit, err := s.actionRequest(w, r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	run, err := s.store.RunCancel(r.Context(), id, audit)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, run)
}

func (s *Server) handleResourceGet(w http.ResponseWriter, r *http.Request) {
	kind := chi.URLParam(r, "kind")
	resource := strings.TrimPrefix(chi.URLParam(r, "*"), "/")
	if converge.ValidateResource(resource) != nil || converge.ValidateKind(kind) != nil {
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
