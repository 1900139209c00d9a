package dlq_test

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/test/cvproc"
)

// cliResult is what one run of the converge binary did.
type cliResult struct {
	stdout, stderr string
	code           int
}

// cli runs the converge binary with args against the stack's API, with
// CONVERGE_URL and CONVERGE_TOKEN set from env (token "" leaves it unset).
func (s *stack) cli(t *testing.T, token string, args ...string) cliResult {
	t.Helper()
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "CONVERGE_URL=" + s.url}
	if token != "" {
		env = append(env, "CONVERGE_TOKEN="+token)
	}
	p := cvproc.Start(t, cvproc.Options{Args: args, Env: env})
	code := p.Wait(t, time.Minute)
	return cliResult{stdout: p.Stdout(), stderr: p.Stderr(), code: code}
}

func wantExit(t *testing.T, r cliResult, code int, args ...string) {
	t.Helper()
	if r.code != code {
		t.Fatalf("converge %v: exit %d, want %d\nstdout: %s\nstderr: %s", args, r.code, code, r.stdout, r.stderr)
	}
}

// TestCLI runs the real converge binary against a real server.
func TestCLI(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	run := func(token string, code int, args ...string) cliResult {
		t.Helper()
		r := s.cli(t, token, args...)
		wantExit(t, r, code, args...)
		return r
	}

	// submit
	r := run(s.operator, 0, "submit", "--kind", "build", "--resource", "app/cli", "--version", "3", "--payload", `{"commit": "abc"}`)
	if !strings.Contains(r.stdout, "EVENT") || !strings.Contains(r.stdout, "app/cli") || !strings.Contains(r.stdout, "queued") {
		t.Fatalf("submit table:\n%s", r.stdout)
	}
	r = run(s.operator, 0, "submit", "--kind", "build", "--resource", "app/cli", "--version", "3", "--payload", `{"commit": "abc"}`, "--json")
	var accepted converge.EventAcceptResult
	if err := json.Unmarshal([]byte(r.stdout), &accepted); err != nil || accepted.Event.Version != 3 || !strings.Contains(string(accepted.Event.Payload), `"abc"`) {
		t.Fatalf("submit --json (a replay): %v\n%s", err, r.stdout)
	}
	r = run(s.operator, 1, "submit", "--kind", "build", "--resource", "app/cli", "--version", "2")
	if !strings.Contains(r.stderr, "stale-version") || !strings.Contains(r.stderr, "HTTP 409") {
		t.Fatalf("stale submit stderr: %s", r.stderr)
	}
	r = run(s.operator, 1, "submit", "--kind", "nope", "--resource", "app/cli", "--version", "9")
	if !strings.Contains(r.stderr, "invalid-request") || !strings.Contains(r.stderr, "kind:") {
		t.Fatalf("bad kind stderr: %s", r.stderr)
	}
	run(s.operator, 2, "submit", "--kind", "build", "--resource", "app/cli")
	run(s.operator, 2, "submit", "--kind", "build", "--resource", "app/cli", "--version", "x")
	run(s.operator, 2, "submit", "--kind", "build", "--resource", "app/cli", "--version", "4", "--payload", "[1]")
	r = run(s.operator, 1, "submit", "--url", "http://127.0.0.1:1", "--kind", "build", "--resource", "app/cli", "--version", "4")
	if !strings.Contains(r.stderr, "cannot reach") {
		t.Fatalf("unreachable stderr: %s", r.stderr)
	}
	r = run("", 1, "submit", "--kind", "build", "--resource", "app/cli", "--version", "4")
	if !strings.Contains(r.stderr, "unauthorized") {
		t.Fatalf("no token stderr: %s", r.stderr)
	}
	// --token wins over CONVERGE_TOKEN.
	run("wrong", 0, "submit", "--token", s.operator, "--kind", "build", "--resource", "app/cli", "--version", "4")

	// dlq list and show
	d1 := s.deadLetter(t, "build", "app/cli-1", 1, converge.ClassPermanent, "http status 404: no such image")
	d2 := s.deadLetter(t, "deploy", "prod/cli-2", 1, converge.ClassTransient, "connection refused")
	d3 := s.deadLetter(t, "deploy", "prod/cli-3", 1, converge.ClassTransient, "connection refused")
	r = run(s.viewer, 0, "dlq", "list")
	for _, want := range []string{"ID", "REASON", d1.ID.String(), d2.ID.String(), d3.ID.String(), "permanent_error", "no such image"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("list table lacks %q:\n%s", want, r.stdout)
		}
	}
	r = run(s.viewer, 0, "dlq", "list", "--kind", "deploy", "--resource", "prod/", "--q", "refused", "--json")
	var page listPage
	if err := json.Unmarshal([]byte(r.stdout), &page); err != nil || len(page.Items) != 2 || page.Items[0].ID != d3.ID {
		t.Fatalf("list --json: %v\n%s", err, r.stdout)
	}
	r = run(s.viewer, 0, "dlq", "list", "--limit", "1")
	m := regexp.MustCompile(`--cursor (\S+)`).FindStringSubmatch(r.stderr)
	if m == nil || !strings.Contains(r.stdout, d3.ID.String()) {
		t.Fatalf("list --limit 1: stdout %s stderr %s", r.stdout, r.stderr)
	}
	r = run(s.viewer, 0, "dlq", "list", "--limit", "1", "--cursor", m[1])
	if !strings.Contains(r.stdout, d2.ID.String()) {
		t.Fatalf("second page:\n%s", r.stdout)
	}
	// A bad flag value is a usage error (SPEC §4: exit 2), found with the
	// API's own parser before any request.
	r = run(s.viewer, 2, "dlq", "list", "--status", "closed")
	if !strings.Contains(r.stderr, "--status:") || !strings.Contains(r.stderr, "must be one of open, redriven, discarded, superseded") {
		t.Fatalf("bad status stderr: %s", r.stderr)
	}
	r = run(s.viewer, 0, "dlq", "show", d1.ID.String())
	for _, want := range []string{"reason", "permanent_error", "app/cli-1", "attempt 1", "no such image"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("show lacks %q:\n%s", want, r.stdout)
		}
	}
	r = run(s.viewer, 0, "dlq", "show", d1.ID.String(), "--json")
	var shown converge.DeadLetter
	if err := json.Unmarshal([]byte(r.stdout), &shown); err != nil || shown.ID != d1.ID || len(shown.Errors) != 1 {
		t.Fatalf("show --json: %v\n%s", err, r.stdout)
	}
	r = run(s.viewer, 1, "dlq", "show", "0190b7a0-0000-7000-8000-000000000000")
	if !strings.Contains(r.stderr, "not-found") {
		t.Fatalf("show unknown stderr: %s", r.stderr)
	}
	run(s.viewer, 2, "dlq", "show", "nope")
	run(s.viewer, 2, "dlq", "show")
	run(s.viewer, 2, "dlq", "frobnicate")
	run(s.viewer, 2, "dlq")
	run(s.viewer, 2, "dlq", "list", "--colour", "red")

	// redrive and discard
	r = run(s.viewer, 1, "dlq", "redrive", d1.ID.String())
	if !strings.Contains(r.stderr, "forbidden") {
		t.Fatalf("viewer redrive stderr: %s", r.stderr)
	}
	r = run(s.operator, 0, "dlq", "redrive", d1.ID.String(), "--reason", "fixed the registry")
	if !strings.Contains(r.stdout, "RUN") || !strings.Contains(r.stdout, "queued") {
		t.Fatalf("redrive table:\n%s", r.stdout)
	}
	r = run(s.operator, 1, "dlq", "redrive", d1.ID.String(), "--json")
	if !strings.Contains(r.stderr, "not-open") || !strings.Contains(r.stderr, "HTTP 409") {
		t.Fatalf("second redrive stderr: %s", r.stderr)
	}
	entries := s.audit(t)
	if len(entries) != 1 || entries[0].Actor != "operator-1" || entries[0].Reason != "fixed the registry" || entries[0].Targets[0] != d1.ID.String() {
		t.Fatalf("audit %+v", entries)
	}
	// Several ids go through the bulk endpoint; a skipped one fails the command.
	r = run(s.operator, 0, "dlq", "discard", d2.ID.String(), d3.ID.String(), "--dry-run", "--json")
	var res bulkResult
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil || len(res.Done) != 2 || !res.DryRun {
		t.Fatalf("discard --dry-run --json: %v\n%s", err, r.stdout)
	}
	r = run(s.operator, 0, "dlq", "discard", d2.ID.String(), "--reason", "host retired")
	if !strings.Contains(r.stdout, "discarded") {
		t.Fatalf("discard table:\n%s", r.stdout)
	}
	r = run(s.operator, 1, "dlq", "discard", d2.ID.String(), d3.ID.String())
	if !strings.Contains(r.stdout, d3.ID.String()+"  discarded") || !strings.Contains(r.stdout, "skipped: not-open") || !strings.Contains(r.stderr, "1 of 2") {
		t.Fatalf("discard of two:\nstdout %s\nstderr %s", r.stdout, r.stderr)
	}
	r = run(s.operator, 0, "dlq", "purge", "--older-than", "0s", "--dry-run")
	if !strings.Contains(r.stdout, "would purge 2") {
		t.Fatalf("purge --dry-run:\n%s", r.stdout)
	}
	run(s.operator, 2, "dlq", "purge", "--older-than", "a while")
	run(s.operator, 2, "dlq", "purge", "--older-than", "-1h")
	if n := s.count(t, `SELECT count(*) FROM converge_dead_letters WHERE status = 'discarded'`); n != 2 {
		t.Fatalf("%d discarded", n)
	}
	// Without --older-than every discarded dead letter is purged.
	r = run(s.operator, 0, "dlq", "purge", "--dry-run")
	if !strings.Contains(r.stdout, "would purge 2") {
		t.Fatalf("purge --dry-run without --older-than:\n%s", r.stdout)
	}
	r = run(s.operator, 0, "dlq", "purge")
	if !strings.Contains(r.stdout, "purged 2") {
		t.Fatalf("purge without --older-than:\n%s", r.stdout)
	}
	if n := s.count(t, `SELECT count(*) FROM converge_dead_letters WHERE status = 'discarded'`); n != 0 {
		t.Fatalf("%d discarded after the purge", n)
	}
}
