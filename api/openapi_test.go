package api_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/converge-run/converge/api"
)

// TestOpenAPICoversRoutes checks the OpenAPI document against the router:
// every /v1 route is documented with its method and role, and every
// documented operation exists.
func TestOpenAPICoversRoutes(t *testing.T) {
	t.Parallel()
	var doc struct {
		OpenAPI string                               `json:"openapi"`
		Paths   map[string]map[string]map[string]any `json:"paths"`
	}
	if err := json.Unmarshal(api.OpenAPI(), &doc); err != nil {
		t.Fatalf("openapi.json is not JSON: %v", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Fatalf("openapi = %q, want 3.x", doc.OpenAPI)
	}
	srv := api.New(api.Config{})
	roles := srv.RouteRoles()
	seen := map[string]bool{}
	err := chi.Walk(srv.Routes(), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		// /hooks/{source} is documented too; it takes no token (the
		// signature authenticates), so it has no role.
		if !strings.HasPrefix(route, "/v1/") && !strings.HasPrefix(route, "/hooks/") {
			return nil
		}
		path := strings.Replace(route, "/*", "/{resource}", 1)
		key := method + " " + route
		seen[method+" "+path] = true
		op, ok := doc.Paths[path][strings.ToLower(method)]
		if !ok {
			t.Errorf("%s is routed but not in openapi.json", key)
			return nil
		}
		if strings.HasPrefix(route, "/hooks/") {
			if role, ok := op["x-converge-role"]; ok {
				t.Errorf("%s: openapi.json says role %v, but a hook takes no token", key, role)
			}
			return nil
		}
		if got, want := op["x-converge-role"], string(roles[key]); got != want {
			t.Errorf("%s: openapi.json says role %v, the router requires %q", key, got, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for path, ops := range doc.Paths {
		for method := range ops {
			if !seen[strings.ToUpper(method)+" "+path] {
				t.Errorf("openapi.json documents %s %s, which is not routed", strings.ToUpper(method), path)
			}
		}
	}
}
