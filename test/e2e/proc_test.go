package e2e

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/converge-run/converge/test/cvproc"
	"github.com/converge-run/converge/test/testkit"
)

// start runs `converge args...` with env until the test ends.
func start(t *testing.T, env []string, args ...string) *cvproc.Process {
	t.Helper()
	return cvproc.Start(t, cvproc.Options{Args: args, Env: env})
}

// run runs `converge args...` with env to its end and returns its exit
// status and output.
func run(t *testing.T, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	p := start(t, env, args...)
	return p.Wait(t, time.Minute), p.Stdout(), p.Stderr()
}

// client talks to a converge API with a token.
type client struct {
	base, token string
}

// do sends a request with a JSON body (when not nil) and decodes a JSON
// answer into a map.
func (c client) do(t *testing.T, method, path string, body any) (int, map[string]any) {
	t.Helper()
	a := testkit.Client{Base: c.base, Token: c.token}.Do(t, method, path, body)
	return a.Status, a.Body
}

// submit posts an event and returns its id.
func (c client) submit(t *testing.T, kind, resource string, version int64, payload map[string]any) string {
	t.Helper()
	status, body := c.do(t, http.MethodPost, "/v1/events", map[string]any{
		"kind": kind, "resource": resource, "version": version, "payload": payload,
	})
	if status != http.StatusAccepted {
		t.Fatalf("submit %s %s@%d: %d %v", kind, resource, version, status, body)
	}
	return body["event"].(map[string]any)["id"].(string)
}

// waitEvent polls an event until its status is terminal and returns it.
func (c client) waitEvent(t *testing.T, id string, timeout time.Duration) map[string]any {
	t.Helper()
	var ev map[string]any
	testkit.Eventually(t, timeout, func() (bool, string) {
		status, body := c.do(t, http.MethodGet, "/v1/events/"+id, nil)
		if status != http.StatusOK {
			t.Fatalf("get event %s: %d %v", id, status, body)
		}
		ev = body
		switch body["status"] {
		case "succeeded", "failed", "superseded", "cancelled":
			return true, ""
		}
		return false, fmt.Sprintf("event %s is %v", id, body["status"])
	})
	return ev
}
