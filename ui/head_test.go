package ui_test

import (
	"net/http"
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
}
