package dlq_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/converge-run/converge"
)

// TestRedriveKindNotServed: a dead letter of a kind that is no longer
// configured (here "retired", never in the stack's configuration, as after
// the kind was removed from it) is refused 409 kind-not-served by the
// single redrive, skipped with that reason by the bulk redrive (dry run
// too), and by the CLI; nothing is written (SPEC §15).
func TestRedriveKindNotServed(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	d := s.deadLetter(t, "retired", "app/old", 1, converge.ClassPermanent, "boom")
	served := s.deadLetter(t, "build", "app/new", 1, converge.ClassPermanent, "boom")
	runsBefore := s.count(t, `SELECT count(*) FROM converge_runs`)

	r := s.do(t, s.operator, http.MethodPost, "/v1/dead-letters/"+d.ID.String()+"/redrive", map[string]any{})
	p := wantProblem(t, r, http.StatusConflict, converge.EKINDNOTSERVED)
	if !strings.Contains(p.Detail, "not configured") {
		t.Fatalf("detail %q does not say why", p.Detail)
	}
	for _, dry := range []bool{true, false} {
		r = s.do(t, s.operator, http.MethodPost, "/v1/dead-letters/redrive",
			map[string]any{"ids": []string{d.ID.String(), served.ID.String()}, "dry_run": dry})
		want(t, r, http.StatusOK)
		var res bulkResult
		r.decode(t, &res)
		if len(res.Done) != 1 || res.Done[0] != served.ID || len(res.Skipped) != 1 ||
			res.Skipped[0].ID != d.ID || res.Skipped[0].Reason != converge.EKINDNOTSERVED {
			t.Fatalf("bulk redrive (dry_run %t): %+v", dry, res)
		}
	}
	cli := s.cli(t, s.operator, "dlq", "redrive", d.ID.String())
	wantExit(t, cli, 1, "dlq", "redrive")
	if !strings.Contains(cli.stderr, "kind-not-served") || !strings.Contains(cli.stderr, "HTTP 409") {
		t.Fatalf("CLI stderr: %s", cli.stderr)
	}
	// Only the served dead letter's redrive wrote a run; the other is
	// still open.
	if n := s.count(t, `SELECT count(*) FROM converge_runs`); n != runsBefore+1 {
		t.Fatalf("runs %d, want %d", n, runsBefore+1)
	}
	got, err := s.store.DeadLetterGet(t.Context(), d.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != converge.DeadLetterOpen {
		t.Fatalf("dead letter %s, want open", got.Status)
	}
}
