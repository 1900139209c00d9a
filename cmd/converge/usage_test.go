package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
)

// TestCLIUsageErrors checks that a bad flag value or a missing or unknown
// subcommand exits 2 without a request to the API, and that with --json a
// bad flag value prints the problem the API would answer.
func TestCLIUsageErrors(t *testing.T) {
	t.Parallel()
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		requests.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"items":[],"next_cursor":null}`))
	}))
	t.Cleanup(srv.Close)
	vars := map[string]string{"CONVERGE_URL": srv.URL, "CONVERGE_TOKEN": "x"}
	for _, args := range [][]string{
		{"dlq", "list", "--status", "bogus"},
		{"dlq", "list", "--limit", "abc"},
		{"dlq", "list", "--limit", "0"},
		{"dlq", "list", "--q", "a\x00b"},
		{"dlq", "list", "--since", "yesterday"},
		{"workflow", "list", "--status", "nope"},
		{"workflow", "list", "--limit", "501"},
		{"migrate"},
		{"migrate", "sideways"},
		{"token"},
		{"dlq"},
		{"workflow"},
		{"dlq", "list", "--nope"},
		{"serve", "--log-format", "xml"},
		{"worker", "--log-format", "logfmt"},
		{"dev", "--log-format", "JSON"},
	} {
		_, stderr, err := secRun(t, vars, args...)
		if code := exitCode(err, &strings.Builder{}); code != 2 {
			t.Errorf("converge %q: exit %d (%v; %s), want 2", args, code, err, stderr)
		}
	}
	if n := requests.Load(); n != 0 {
		t.Errorf("%d requests sent for usage errors", n)
	}
	stdout, _, err := secRun(t, vars, "dlq", "list", "--status", "bogus", "--json")
	var p struct {
		Type   string `json:"type"`
		Status int    `json:"status"`
		Errors []struct {
			Field string `json:"field"`
		} `json:"errors"`
	}
	if exitCode(err, &strings.Builder{}) != 2 || json.Unmarshal([]byte(stdout), &p) != nil ||
		p.Type != "urn:converge:problem:invalid-request" || len(p.Errors) != 1 || p.Errors[0].Field != "status" {
		t.Errorf("--json usage error: %v, stdout %q; want exit 2 and a problem naming status", err, stdout)
	}
	if _, _, err := secRun(t, vars, "dlq", "list"); err != nil {
		t.Errorf("a good dlq list: %v", err)
	}
}

// TestCLIJSONProblem checks that with --json a failed request prints the
// API's problem body on stdout (and exits 1).
func TestCLIJSONProblem(t *testing.T) {
	t.Parallel()
	const problem = `{"type":"urn:converge:problem:not-found","title":"Not found","status":404,"detail":"no such dead letter"}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(problem + "\n"))
	}))
	t.Cleanup(srv.Close)
	vars := map[string]string{"CONVERGE_URL": srv.URL, "CONVERGE_TOKEN": "x"}
	stdout, stderr, err := secRun(t, vars, "dlq", "show", uuid.NewString(), "--json")
	if exitCode(err, &strings.Builder{}) != 1 || strings.TrimSpace(stdout) != problem {
		t.Errorf("exit %v, stdout %q (stderr %q): want 1 and the problem body", err, stdout, stderr)
	}
	stdout, _, _ = secRun(t, vars, "dlq", "show", uuid.NewString())
	if stdout != "" {
		t.Errorf("without --json, stdout %q, want nothing", stdout)
	}
}
