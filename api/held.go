package api

import (
	"context"
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"

	"github.com/converge-run/converge"
)

// Held work (SPEC §11): approving and rejecting held runs, listing and
// releasing quarantined streams.

func (s *Server) handleRunApprove(w http.ResponseWriter, r *http.Request) {
	s.handleRunDecide(w, r, s.store.RunApprove)
}

func (s *Server) handleRunReject(w http.ResponseWriter, r *http.Request) {
	s.handleRunDecide(w, r, s.store.RunReject)
}

// handleRunDecide reads the run id and the optional reason and answers
// decide's run.
func (s *Server) handleRunDecide(w http.ResponseWriter, r *http.Request,
	decide func(context.Context, uuid.UUID, converge.AuditEntry) (*converge.Run, error)) {
	id, audit, err := s.actionRequest(w, r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	run, err := decide(r.Context(), id, audit)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, run)
}

// releaseRouteDetail is the detail of a 404 on a quarantine path that is
// no release.
const releaseRouteDetail = "no such route: a release is POST /v1/quarantine/{kind}/{resource}/release, with a kind and a resource key that are valid and the final /release written plainly"

func (s *Server) handleQuarantineRelease(w http.ResponseWriter, r *http.Request) {
	// A resource key holds slashes: the route is /quarantine/{kind}/*,
	// and the path ends in /release: as sent, for a resource
	// x%2Frelease is the resource x/release, not x released.
	kind := chi.URLParam(r, "kind")
	rest := strings.TrimPrefix(chi.URLParam(r, "*"), "/")
	resource, ok := strings.CutSuffix(rest, "/release")
	if !ok || !strings.HasSuffix(r.URL.EscapedPath(), "/release") || converge.ValidateResource(resource) != nil || converge.ValidateKind(kind) != nil {
		s.writeError(w, r, converge.Errorf(converge.ENOTFOUND, "%s", releaseRouteDetail))
		return
	}
	var body struct {
		Reason string `json:"reason"`
	}
	if err := decodeOptionalBody(w, r, &body); err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := CheckReason(body.Reason); err != nil {
		s.writeError(w, r, err)
		return
	}
	res, err := s.store.QuarantineRelease(r.Context(), kind, resource, auditFor(r, body.Reason))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, res)
}
