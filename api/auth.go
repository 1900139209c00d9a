package api

import (
	"context"
	"crypto/subtle"
	"errors"
	"net/http"
	"strings"

	"github.com/converge-run/converge"
)

// Authenticate resolves a bearer token to an actor: the admin token from the
// environment, or a stored token.
func (s *Server) Authenticate(ctx context.Context, token string) (*converge.Actor, error) {
	if token == "" {
		return nil, converge.Errorf(converge.EUNAUTHORIZED, "a bearer token is required")
	}
	if admin := s.cfg.AdminToken; admin != "" && subtle.ConstantTimeCompare([]byte(token), []byte(admin)) == 1 {
		return &converge.Actor{Name: "admin", Role: converge.RoleOperator}, nil
	}
	a, err := s.store.TokenAuthenticate(ctx, token)
	if errors.Is(err, converge.ErrNotFound) {
		return nil, converge.Errorf(converge.EUNAUTHORIZED, "the token is not valid")
	}
	if err != nil {
		return nil, err
	}
	return a, nil
}

// authenticate requires a valid bearer token on every request and puts its
// actor into the context, in place of whatever the context held: an actor
// already there is never trusted.
func (s *Server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, err := s.Authenticate(r.Context(), bearerToken(r))
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="converge"`)
			s.writeError(w, r, err)
			return
		}
		next.ServeHTTP(w, r.WithContext(converge.WithActor(r.Context(), a)))
	})
}

// bearerToken returns the token of an "Authorization: Bearer <token>"
// header (the scheme is case-insensitive), or "" when there is none.
func bearerToken(r *http.Request) string {
	scheme, token, ok := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(token)
}

// requireRole answers 403 unless the actor's role includes need.
func requireRole(need converge.Role) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			a := converge.ActorFrom(r.Context())
			if a == nil || !a.Role.Includes(need) {
				writeProblem(w, r, converge.Errorf(converge.EFORBIDDEN, "this needs the %s role", need))
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}
