package api

import (
	"github.com/go-chi/chi/v5"

	"github.com/converge-run/converge"
)

// OpenAPI returns the OpenAPI 3 document of /v1.
func OpenAPI() []byte { return openAPIDoc }

// Routes returns the router, for walking the registered routes in tests.
func (s *Server) Routes() chi.Routes { return s.router }

// RouteRoles lists the role each /v1 route requires, keyed "METHOD
// pattern". The route × role test walks the router and fails on a route
// missing here.
func (s *Server) RouteRoles() map[string]converge.Role { return s.roles }
