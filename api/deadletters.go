package api

import "github.com/go-chi/chi/v5"

// deadLetterRoutes registers the dead-letter routes.
func (s *Server) deadLetterRoutes(r chi.Router) {}
