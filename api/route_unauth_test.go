package api_test

import (
	"net/http"
	"testing"
)

// TestRouteErrorsBeforeAuth: a path no route takes is 404 and a method its
// route does not serve is 405 with Allow, with a token or without (the
// route table is the public /openapi.json); every real route still wants a
// token (401).
func TestRouteErrorsBeforeAuth(t *testing.T) {
	t.Parallel()
	s := evNewStack(t, "")
	for _, auth := range []string{"", "Bearer " + evAdminToken, "Bearer nope"} {
		h := map[string]string{"Authorization": auth}
		evWantProblem(t, s.do(t, http.MethodGet, "/v1/nope", nil, h), http.StatusNotFound, "not-found")
		evWantProblem(t, s.do(t, http.MethodGet, "/v1", nil, h), http.StatusNotFound, "not-found")
		// No method takes a quarantine path that does not end in
		// /release: 404, as its POST is, not 405.
		evWantProblem(t, s.do(t, http.MethodGet, "/v1/quarantine/build/app/web", nil, h), http.StatusNotFound, "not-found")
		evWantProblem(t, s.do(t, http.MethodPost, "/v1/quarantine/build/app/web", nil, h), http.StatusNotFound, "not-found")
		for _, x := range []struct{ method, path, allow string }{
			{http.MethodDelete, "/v1/events", "GET, HEAD, POST"},
			{http.MethodPut, "/v1/runs/01a24268-a25a-7895-b0db-fc5edf076d27/cancel", "POST"},
			{http.MethodGet, "/v1/dead-letters/redrive", "POST"},
			{http.MethodPut, "/v1/dead-letters/redrive", "POST"},
			{http.MethodDelete, "/v1/dead-letters/purge", "POST"},
			{http.MethodGet, "/v1/quarantine/build/app/web/release", "POST"},
		} {
			r := s.do(t, x.method, x.path, nil, h)
			evWantProblem(t, r, http.StatusMethodNotAllowed, "method-not-allowed")
			if got := r.header.Get("Allow"); got != x.allow {
				t.Errorf("%s %s (%q): Allow %q, want %q", x.method, x.path, auth, got, x.allow)
			}
		}
	}
	for _, x := range []struct{ method, path string }{
		{http.MethodGet, "/v1/events"}, {http.MethodPost, "/v1/events"},
		{http.MethodGet, "/v1/resources/build/app/web"}, {http.MethodGet, "/v1/events/01a24268-a25a-7895-b0db-fc5edf076d27"},
		{http.MethodHead, "/v1/dead-letters"},
	} {
		r := s.do(t, x.method, x.path, nil, map[string]string{"Authorization": ""})
		if r.status != http.StatusUnauthorized || r.header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s %s without a token: %d (WWW-Authenticate %q), want 401", x.method, x.path, r.status, r.header.Get("WWW-Authenticate"))
		}
	}
}
