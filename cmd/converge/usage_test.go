package main

import (
	"encoding/json"
	"fmt"
	"io"
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
		{"completion"},
		{"completion", "bogus"},
		// A token that cannot be a header, a URL with a query.
		{"dlq", "list", "--token", "a\nb"},
		{"dlq", "list", "--token", "two words"},
		{"dlq", "list", "--url", "http://127.0.0.1:1/?x=1"},
		{"dlq", "purge", "--older-than", "30dd"},
		{"dlq", "purge", "--older-than", "-1d"},
		{"dlq", "list", "--nope"},
		{"serve", "--log-format", "xml"},
		{"worker", "--log-format", "logfmt"},
		{"dev", "--log-format", "JSON"},
		// Negative durations and rates out of range (they ran).
		{"migrate", "up", "--wait", "-1s"},
		{"demo-target", "--latency", "-1s", "--listen", "127.0.0.1:0"},
		{"dev", "--demo-latency", "-1s"},
		{"dev", "--demo-transient", "2"},
		{"help", "nope"},
	} {
		_, stderr, err := secRun(t, vars, args...)
		if code := exitCode(err, &strings.Builder{}); code != 2 {
			t.Errorf("converge %q: exit %d (%v; %s), want 2", args, code, err, stderr)
		}
	}
	if n := requests.Load(); n != 0 {
		t.Errorf("%d requests sent for usage errors", n)
	}
	// A negative bench size or duration (it was taken as 0, the default),
	// refused before the database is reached.
	benchVars := map[string]string{"DATABASE_URL": "postgres://127.0.0.1:1/none?connect_timeout=1"}
	for _, args := range [][]string{
		{"bench", "pipeline", "--events", "-5"},
		{"bench", "storm", "--latency", "-1ms"},
		{"bench", "ingest", "--rate", "-2"},
		{"bench", "soak", "--retain", "-1s"},
	} {
		_, stderr, err := secRun(t, benchVars, args...)
		if code := exitCode(err, &strings.Builder{}); code != 2 || !strings.Contains(stderr, "must not be negative") {
			t.Errorf("converge %q: exit %d (%v; %s), want 2 naming the flag", args, code, err, stderr)
		}
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
	// A malformed id is named for what it should be.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"dlq", "show", "xx"}, `"xx" is not a dead letter id`},
		{[]string{"runs", "approve", "xx"}, `"xx" is not a run id`},
		{[]string{"runs", "reject", "xx"}, `"xx" is not a run id`},
		{[]string{"workflow", "show", "xx"}, `"xx" is not a workflow run id`},
		{[]string{"workflow", "cancel", "xx"}, `"xx" is not a workflow run id`},
	} {
		_, stderr, err := secRun(t, vars, c.args...)
		if code := exitCode(err, &strings.Builder{}); code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("converge %q: exit %d, stderr %q; want 2 and %q", c.args, code, stderr, c.want)
		}
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

// usageProblemBody is the problem body --json prints for a usage error.
type usageProblemBody struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Errors []struct {
		Field   string `json:"field"`
		Message string `json:"message"`
	} `json:"errors"`
}

// oneProblem decodes stdout as exactly one problem body on one line.
func oneProblem(stdout string) (usageProblemBody, error) {
	var p usageProblemBody
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	if len(lines) != 1 || !strings.HasSuffix(stdout, "\n") {
		return p, fmt.Errorf("%d lines, want one problem line", len(lines))
	}
	dec := json.NewDecoder(strings.NewReader(lines[0]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return p, err
	}
	return p, nil
}

// TestCLIBareConverge checks that converge without a command is a usage
// error with the help on standard error, while --help and help print it
// on standard output and exit 0.
func TestCLIBareConverge(t *testing.T) {
	t.Parallel()
	stdout, stderr, err := secRun(t, nil)
	if code := exitCode(err, &strings.Builder{}); code != 2 || stdout != "" ||
		!strings.Contains(stderr, "Available Commands:") || !strings.Contains(stderr, "needs a command: one of api, audit, bench") {
		t.Errorf("converge: exit %d (%v), stdout %q, stderr %q; want 2, the help and the commands on stderr", code, err, stdout, stderr)
	}
	for _, args := range [][]string{{"--help"}, {"help"}, {"-h"}, {"help", "dlq"}} {
		stdout, stderr, err := secRun(t, nil, args...)
		if err != nil || !strings.Contains(stdout, "Available Commands:") || stderr != "" {
			t.Errorf("converge %q: %v, stdout %q, stderr %q; want exit 0 and the help on stdout", args, err, stdout, stderr)
		}
	}
	// cobra's completion command is a group like the others: bare, a
	// usage error (TestCLIUsageErrors); with a shell, the script.
	if stdout, stderr, err := secRun(t, nil, "completion", "bash"); err != nil || !strings.Contains(stdout, "bash completion") {
		t.Errorf("converge completion bash: %v, stdout %.80q, stderr %q; want exit 0 and the script", err, stdout, stderr)
	}
}

// TestCLIStreamFlags checks that submit and workflow start refuse a bad
// --kind/--workflow name, --resource key, --version or --payload with the
// API's rules, exit 2 naming the flag and send nothing, while a
// well-formed kind or workflow the server may not know is sent.
func TestCLIStreamFlags(t *testing.T) {
	t.Parallel()
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		requests.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		_, _ = w.Write([]byte(`{}`))
	}))
	t.Cleanup(srv.Close)
	vars := map[string]string{"CONVERGE_URL": srv.URL, "CONVERGE_TOKEN": "x"}
	for _, c := range []struct {
		flag string
		args []string
	}{
		{"version", []string{"submit", "--kind", "build", "--resource", "app", "--version", "0"}},
		{"version", []string{"submit", "--kind", "build", "--resource", "app", "--version", "-1"}},
		{"resource", []string{"submit", "--kind", "build", "--resource", "/app", "--version", "1"}},
		{"resource", []string{"submit", "--kind", "build", "--resource", "a b", "--version", "1"}},
		{"resource", []string{"submit", "--kind", "build", "--resource", "", "--version", "1"}},
		{"resource", []string{"submit", "--kind", "build", "--resource", strings.Repeat("a", 201), "--version", "1"}},
		{"kind", []string{"submit", "--kind", "Build", "--resource", "app", "--version", "1"}},
		{"kind", []string{"submit", "--kind", "9build", "--resource", "app", "--version", "1"}},
		{"payload", []string{"submit", "--kind", "build", "--resource", "app", "--version", "1", "--payload", "[1]"}},
		{"payload", []string{"submit", "--kind", "build", "--resource", "app", "--version", "1", "--payload", `{"a":"\u0000"}`}},
		{"version", []string{"workflow", "start", "--workflow", "release", "--resource", "app", "--version", "0"}},
		{"resource", []string{"workflow", "start", "--workflow", "release", "--resource", "-app", "--version", "3"}},
		{"workflow", []string{"workflow", "start", "--workflow", "Release", "--resource", "app", "--version", "3"}},
		{"payload", []string{"workflow", "start", "--workflow", "release", "--resource", "app", "--version", "3", "--payload", "nope"}},
	} {
		stdout, stderr, err := secRun(t, vars, c.args...)
		if code := exitCode(err, &strings.Builder{}); code != 2 || stdout != "" || !strings.Contains(stderr, "converge: --"+c.flag+": ") {
			t.Errorf("converge %q: exit %d (%v), stdout %q, stderr %q; want 2 naming --%s", c.args, code, err, stdout, stderr, c.flag)
		}
		stdout, _, err = secRun(t, vars, append(c.args, "--json")...)
		p, perr := oneProblem(stdout)
		if code := exitCode(err, &strings.Builder{}); code != 2 || perr != nil || p.Type != "urn:converge:problem:invalid-request" ||
			p.Status != http.StatusUnprocessableEntity || len(p.Errors) != 1 || p.Errors[0].Field != c.flag || p.Errors[0].Message == "" {
			t.Errorf("converge %q --json: exit %d, stdout %q (%v); want 2 and a problem naming %s", c.args, code, stdout, perr, c.flag)
		}
	}
	if n := requests.Load(); n != 0 {
		t.Errorf("%d requests sent for bad stream flags", n)
	}
	// Every bad field is named, in the body's order.
	stdout, _, _ := secRun(t, vars, "submit", "--kind", "B", "--resource", "/x", "--version", "0", "--json")
	p, err := oneProblem(stdout)
	var fields []string
	for _, fe := range p.Errors {
		fields = append(fields, fe.Field)
	}
	if err != nil || strings.Join(fields, ",") != "kind,resource,version" {
		t.Errorf("three bad flags: stdout %q (%v), want kind, resource and version named", stdout, err)
	}
	// Whether a kind or workflow is configured only the server knows.
	for _, args := range [][]string{
		{"submit", "--kind", "no-such-kind", "--resource", "app/web@1:x_y.z", "--version", "9223372036854775807", "--payload", `{"a":[1]}`},
		{"workflow", "start", "--workflow", "no_such_workflow", "--resource", "app", "--version", "1"},
	} {
		if _, stderr, err := secRun(t, vars, args...); err != nil {
			t.Errorf("converge %q: %v (%s), want it sent", args, err, stderr)
		}
	}
	if n := requests.Load(); n != 2 {
		t.Errorf("%d requests for two well-formed commands, want 2", n)
	}
}

// TestCLIJSONUsageProblems checks that with --json every usage error, be
// it a flag cobra cannot parse, a missing flag, subcommand or argument, or
// a bad value the API's rules refuse, prints one problem body on stdout.
func TestCLIJSONUsageProblems(t *testing.T) {
	t.Parallel()
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { requests.Add(1) }))
	t.Cleanup(srv.Close)
	vars := map[string]string{"CONVERGE_URL": srv.URL, "CONVERGE_TOKEN": "x"}
	for _, args := range [][]string{
		{"submit", "--json", "--payload", "[1]"},
		{"submit", "--json"},
		{"submit", "--version", "abc", "--json", "--kind", "build"},
		{"submit", "--json", "--version", "abc"},
		{"submit", "--kind", "build", "--resource", "app", "--version", "1", "--json", "--url", "ftp://x"},
		{"dlq", "list", "--json", "--limit", "0"},
		{"dlq", "list", "--limit", "abc", "--json"},
		{"dlq", "show", "--json"},
		{"dlq", "show", "not-a-uuid", "--json"},
		{"dlq", "redrive", "--json", "--nope"},
		{"dlq", "--json"},
		{"dlq", "bogus", "--json"},
		{"workflow", "--json"},
		{"workflow", "start", "--json", "--workflow", "release", "--resource", "app", "--version", "0"},
		{"workflow", "list", "--json", "--status", "nope"},
		{"bogus", "--json"},
		{"--json"},
	} {
		stdout, stderr, err := secRun(t, vars, args...)
		p, perr := oneProblem(stdout)
		if code := exitCode(err, &strings.Builder{}); code != 2 || perr != nil || p.Type != "urn:converge:problem:invalid-request" ||
			p.Title != "Invalid request" || p.Status != http.StatusUnprocessableEntity || p.Detail == "" {
			t.Errorf("converge %q: exit %d (%v), stdout %q (%v), stderr %q; want 2 and one problem body", args, code, err, stdout, perr, stderr)
		}
	}
	if n := requests.Load(); n != 0 {
		t.Errorf("%d requests sent for usage errors", n)
	}
	// --json=false, or a "--json" after "--", is not --json.
	for _, args := range [][]string{{"dlq", "list", "--json=false", "--limit", "0"}, {"dlq", "show", "--", "--json"}} {
		stdout, _, err := secRun(t, vars, args...)
		if code := exitCode(err, &strings.Builder{}); code != 2 || stdout != "" {
			t.Errorf("converge %q: exit %d, stdout %q; want 2 and nothing on stdout", args, code, stdout)
		}
	}
}

// TestCLIJSONUnreachable checks that with --json a request that gets no
// answer prints an unavailable problem body and exits 1; without --json,
// nothing on stdout.
func TestCLIJSONUnreachable(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	vars := map[string]string{"CONVERGE_URL": srv.URL, "CONVERGE_TOKEN": "x"}
	srv.Close()
	for _, args := range [][]string{
		{"submit", "--kind", "build", "--resource", "app", "--version", "1", "--json"},
		{"dlq", "list", "--json"},
		{"workflow", "show", uuid.NewString(), "--json"},
	} {
		stdout, stderr, err := secRun(t, vars, args...)
		p, perr := oneProblem(stdout)
		if code := exitCode(err, &strings.Builder{}); code != 1 || perr != nil || p.Type != "urn:converge:problem:unavailable" ||
			p.Status != http.StatusServiceUnavailable || !strings.Contains(p.Detail, "cannot reach the converge API") ||
			!strings.Contains(stderr, "cannot reach the converge API") {
			t.Errorf("converge %q: exit %d (%v), stdout %q (%v), stderr %q; want 1 and an unavailable problem", args, code, err, stdout, perr, stderr)
		}
		stdout, _, err = secRun(t, vars, args[:len(args)-1]...)
		if code := exitCode(err, &strings.Builder{}); code != 1 || stdout != "" {
			t.Errorf("converge %q without --json: exit %d, stdout %q; want 1 and nothing", args, code, stdout)
		}
	}
}

// TestCLIJSONForeignAnswer checks that an error answer that is not a
// problem body (a proxy's HTML page, JSON of another shape, no body)
// prints, with --json, one problem body on stdout made of it: the slug
// converge answers the status with (unavailable for a gateway's 502 and
// 504, unexpected-response for a status converge never answers), the
// status as answered and the start of the body as the detail; without
// --json, nothing on stdout and a readable line on stderr. Both exit 1.
func TestCLIJSONForeignAnswer(t *testing.T) {
	t.Parallel()
	page := "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\x1b[31m<center><h1>502 Bad Gateway</h1></center>" +
		strings.Repeat("<!-- padding -->", 100) + "</body></html>\n"
	for _, c := range []struct {
		status              int
		contentType, body   string
		slug, title, detail string
	}{
		{http.StatusBadGateway, "text/html", page, "unavailable", "Service unavailable",
			"the API answered HTTP 502 Bad Gateway (text/html), not a problem body: <html> <head><title>502 Bad Gateway</title></head> <body> [31m<center>"},
		{http.StatusGatewayTimeout, "", "", "unavailable", "Service unavailable",
			"the API answered HTTP 504 Gateway Timeout with no body"},
		{http.StatusNotFound, "application/json", `{"message":"no route"}`, "not-found", "Not found",
			`the API answered HTTP 404 Not Found (application/json), not a problem body: {"message":"no route"}`},
		{http.StatusRequestEntityTooLarge, "text/html", "<h1>413 Request Entity Too Large</h1>", "payload-too-large", "Payload too large",
			"the API answered HTTP 413 Request Entity Too Large (text/html), not a problem body: <h1>413 Request Entity Too Large</h1>"},
		{http.StatusProxyAuthRequired, "text/plain", "proxy login", "unexpected-response", "Unexpected response",
			"the API answered HTTP 407 Proxy Authentication Required (text/plain), not a problem body: proxy login"},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			if c.contentType != "" {
				w.Header().Set("Content-Type", c.contentType)
			}
			w.WriteHeader(c.status)
			_, _ = w.Write([]byte(c.body))
		}))
		vars := map[string]string{"CONVERGE_URL": srv.URL, "CONVERGE_TOKEN": "x"}
		for _, args := range [][]string{
			{"dlq", "show", uuid.NewString()},
			{"submit", "--kind", "build", "--resource", "app", "--version", "1"},
		} {
			stdout, stderr, err := secRun(t, vars, append(args, "--json")...)
			p, perr := oneProblem(stdout)
			if code := exitCode(err, &strings.Builder{}); code != 1 || perr != nil || p.Type != "urn:converge:problem:"+c.slug ||
				p.Title != c.title || p.Status != c.status || !strings.HasPrefix(p.Detail, c.detail) || len(p.Detail) > len(c.detail)+250 {
				t.Errorf("%d: converge %q --json: exit %d (%v), stdout %q (%v), stderr %q; want 1 and a %s problem with detail %q",
					c.status, args, code, err, stdout, perr, stderr, c.slug, c.detail)
			}
			stdout, stderr, err = secRun(t, vars, args...)
			line := strings.TrimSuffix(stderr, "\n")
			if code := exitCode(err, &strings.Builder{}); code != 1 || stdout != "" || strings.Contains(line, "\n") ||
				strings.ContainsAny(line, "\r\x1b") || !strings.HasPrefix(line, "converge: "+c.detail) ||
				!strings.HasSuffix(line, fmt.Sprintf("(%s, HTTP %d)", c.slug, c.status)) {
				t.Errorf("%d: converge %q: exit %d, stdout %q, stderr %q; want 1, nothing on stdout and one line on stderr",
					c.status, args, code, stdout, stderr)
			}
		}
		srv.Close()
	}
}

// TestCLIFlagParseProblem: a flag value pflag cannot parse, or a flag
// without its value, is a usage error (exit 2) whose problem names the flag
// under errors, in converge's words rather than the Go parser's.
func TestCLIFlagParseProblem(t *testing.T) {
	t.Parallel()
	vars := map[string]string{"CONVERGE_URL": "http://127.0.0.1:1", "CONVERGE_TOKEN": "x"}
	for _, x := range []struct {
		args  []string
		field string
	}{
		{[]string{"submit", "--kind", "build", "--resource", "a", "--version", "abc", "--json"}, "version"},
		{[]string{"migrate", "up", "--wait", "5q", "--json"}, "wait"},
		{[]string{"dlq", "list", "--json", "--since"}, "since"},
		// A required flag left out (cobra's own error).
		{[]string{"submit", "--kind", "build", "--version", "1", "--json"}, "resource"},
		{[]string{"workflow", "start", "--workflow", "release", "--resource", "a", "--json"}, "version"},
	} {
		stdout, stderr, err := secRun(t, vars, x.args...)
		p, perr := oneProblem(stdout)
		if code := exitCode(err, &strings.Builder{}); code != 2 || perr != nil || len(p.Errors) != 1 || p.Errors[0].Field != x.field ||
			strings.Contains(stdout+stderr, "strconv") || strings.Contains(stdout+stderr, "time: ") {
			t.Errorf("converge %q: exit %d, stdout %q (%v), stderr %q; want 2 and a problem naming %q", x.args, code, stdout, perr, stderr, x.field)
		}
	}
}

// TestCLIPurgeOlderThanDays: dlq purge --older-than takes days as the
// configuration's durations do (30d, 1d12h) and sends them as given.
func TestCLIPurgeOlderThanDays(t *testing.T) {
	t.Parallel()
	bodies := make(chan string, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		bodies <- string(b)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"purged":[],"dry_run":true,"more":false}`))
	}))
	t.Cleanup(srv.Close)
	vars := map[string]string{"CONVERGE_URL": srv.URL, "CONVERGE_TOKEN": "x"}
	for _, d := range []string{"30d", "1d12h"} {
		if _, stderr, err := secRun(t, vars, "dlq", "purge", "--older-than", d, "--dry-run", "--json"); err != nil {
			t.Errorf("dlq purge --older-than %s: %v (%s)", d, err, stderr)
			continue
		}
		if b := <-bodies; !strings.Contains(b, `"older_than":"`+d+`"`) {
			t.Errorf("dlq purge --older-than %s sent %s", d, b)
		}
	}
}
