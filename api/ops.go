package api

import (
	"context"
	_ "embed"
	"net/http"
	"time"
)

//go:embed openapi.json
var openAPIDoc []byte

func (s *Server) handleHealthz(w http.ResponseWriter, r *http.Request) {
	s.writeJSON(w, r, http.StatusOK, map[string]string{"status": "ok"})
}

func (s *Server) handleReadyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := s.store.Ping(ctx); err != nil {
		s.writeJSON(w, r, http.StatusServiceUnavailable, map[string]string{"status": "unavailable", "reason": "database unreachable"})
		return
	}
	if s.cfg.SchemaCurrent != nil {
		if err := s.cfg.SchemaCurrent(ctx); err != nil {
			s.writeJSON(w, r, http.StatusServiceUnavailable, map[string]string{"status": "unavailable", "reason": "schema not current"})
			return
		}
	}
	s.writeJSON(w, r, http.StatusOK, map[string]string{"status": "ready"})
}

func (s *Server) handleOpenAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openAPIDoc)
}
