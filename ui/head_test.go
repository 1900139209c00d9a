package ui_test

import (
	"net/http"
	"strings"
	"testing"
)

// TestDashboardHead: every dashboard GET route answers HEAD (SPEC §4
// "Limits on input") with the GET's status and headers and no body, signed
// out and signed in; a POST-only route still answers HEAD 405.
func TestDashboardHead(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	d := s.waitDeadLetters(t, wantDeadLetters)[0]

	check := func(c *client, path string) {
		t.Helper()
		get, getBody := c.get(path)
		head, headBody := c.do(http.MethodHead, path, nil, nil)
		if head.StatusCode != get.StatusCode {
			t.Errorf("HEAD %s: status %d, GET %d\n%s", path, head.StatusCode, get.StatusCode, headBody)
		}
		if headBody != "" {
			t.Errorf("HEAD %s: a body of %d bytes", path, len(headBody))
		}
		for _, h := range []string{"Content-Type", "Location", "Content-Security-Policy"} {
			if head.Header.Get(h) != get.Header.Get(h) {
				t.Errorf("HEAD %s: %s %q, GET %q", path, h, head.Header.Get(h), get.Header.Get(h))
			}
		}
		if get.StatusCode == http.StatusOK && getBody == "" {
			t.Errorf("GET %s: an empty page", path)
		}
	}
	out := newClient(t, s.srv.URL)
	for _, path := range []string{"/ui/sign-in", "/ui/", "/ui/dead-letters", "/ui/static/style.css", "/ui/no-such-page"} {
		check(out, path)
	}
	in := newClient(t, s.srv.URL)
	in.signIn(s.operator)
	for _, path := range []string{"/ui/", "/ui/dead-letters", "/ui/dead-letters/" + d.ID.String(), "/ui/streams",
		"/ui/workflow-runs", "/ui/deliveries", "/ui/sign-in"} {
		check(in, path)
	}
	resp, body := in.do(http.MethodHead, "/ui/sign-out", nil, nil)
	wantStatus(t, "HEAD /ui/sign-out", resp, body, http.StatusMethodNotAllowed)
	if resp.Header.Get("Allow") == "" {
		t.Error("HEAD /ui/sign-out: no Allow")
	}
	// The Allow of a 405 lists only what the dashboard's route serves,
	// never the refused method (the mount at /ui takes every method).
	for _, x := range []struct{ method, path, allow string }{
		{http.MethodDelete, "/ui", "GET, HEAD"}, {http.MethodPut, "/ui", "GET, HEAD"}, {http.MethodPatch, "/ui", "GET, HEAD"},
		{http.MethodDelete, "/ui/", "GET, HEAD"}, {http.MethodPut, "/ui/", "GET, HEAD"}, {http.MethodPatch, "/ui/", "GET, HEAD"},
		{http.MethodDelete, "/ui/sign-in", "GET, HEAD, POST"}, {http.MethodPut, "/ui/dead-letters", "GET, HEAD"},
		{http.MethodHead, "/ui/sign-out", "POST"},
	} {
		for _, c := range []*client{out, in} {
			resp, body := c.do(x.method, x.path, nil, sameOrigin)
			wantStatus(t, x.method+" "+x.path, resp, body, http.StatusMethodNotAllowed)
			if got := resp.Header.Get("Allow"); got != x.allow {
				t.Errorf("%s %s: Allow %q, want %q", x.method, x.path, got, x.allow)
			}
			// A page for a person, not the API's problem.
			if ct := resp.Header.Get("Content-Type"); x.method != http.MethodHead && !strings.HasPrefix(ct, "text/html") {
				t.Errorf("%s %s: Content-Type %q, want a page", x.method, x.path, ct)
			}
		}
	}
}
