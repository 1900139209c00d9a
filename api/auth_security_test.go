package api_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/converge-run/converge"
)

// TestForgedContextActor sends every /v1 route a request whose context
// already carries an operator actor (as a handler mounted in front of the
// API, or a bug in one, could put there) but no valid token: the API must
// answer 401 all the same, and a valid token below the route's role must
// still get 403, its own actor taking the forged one's place.
func TestForgedContextActor(t *testing.T) {
	t.Parallel()
	s := newSecServer(t, secOptions{})
	forged := &converge.Actor{Name: "admin", Role: converge.RoleOperator}
	fake := uuid.Must(uuid.NewV7())
	for _, route := range secV1Routes(t, s.Server) {
		spec := secRouteTable[route]
		method, pattern := secSplitRoute(route)
		path := secFillPath(pattern, fake)
		for _, p := range s.principals() {
			if p.role != "" && p.role.Includes(spec.role) {
				continue
			}
			t.Run(route+"/"+p.name, func(t *testing.T) {
				var body io.Reader
				if method != http.MethodGet {
					body = strings.NewReader(`{}`)
				}
				r := httptest.NewRequestWithContext(converge.WithActor(t.Context(), forged), method, path, body)
				if p.header != "" {
					r.Header.Set("Authorization", p.header)
				}
				if body != nil {
					r.Header.Set("Content-Type", "application/json")
				}
				w := httptest.NewRecorder()
				s.ServeHTTP(w, r)
				if p.role == "" {
					if w.Code != http.StatusUnauthorized {
						t.Fatalf("%s %s as %s with a forged operator in the context = %d %s, want 401", method, path, p.name, w.Code, w.Body)
					}
					secCheckProblem(t, w, converge.EUNAUTHORIZED)
					return
				}
				if w.Code != http.StatusForbidden {
					t.Fatalf("%s %s as %s with a forged operator in the context = %d %s, want 403", method, path, p.name, w.Code, w.Body)
				}
				secCheckProblem(t, w, converge.EFORBIDDEN)
			})
		}
	}
}
