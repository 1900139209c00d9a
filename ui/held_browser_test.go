package ui_test

import (
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/converge-run/converge"
)

// TestBrowserHeldWork drives Chromium through the held-work buttons of the
// overview: a viewer sees the held runs and the quarantined stream but no
// button; an operator approves one run, rejects another and releases the
// quarantined stream by clicking, each answered by a redirect back to the
// overview with a flash, and the database holds each outcome.
func TestBrowserHeldWork(t *testing.T) {
	t.Parallel()
	chromiumPath(t)
	s := newStack(t)
	s.waitDeadLetters(t, wantDeadLetters)
	ctx := t.Context()
	approve, reject := heldRun(t, s, "prod/browser-a"), heldRun(t, s, "prod/browser-b")
	quarantine(t, s, "app/browser-quarantined")

	viewer := newBrowser(t, s.srv.URL)
	wantEq(t, "viewer sign-in page", viewer.open("/ui/sign-in"), 200)
	wantEq(t, "viewer sign in", viewer.signIn(s.viewer), 200)
	wantEq(t, "viewer overview", viewer.open("/ui/"), 200)
	held := viewer.text("[data-testid=held-runs]")
	for _, want := range []string{"prod/browser-a", "prod/browser-b"} {
		if !strings.Contains(held, want) {
			t.Fatalf("viewer's held runs lack %s: %q", want, held)
		}
	}
	if q := viewer.text("[data-testid=quarantined]"); !strings.Contains(q, "app/browser-quarantined") {
		t.Fatalf("viewer's quarantined streams: %q", q)
	}
	wantEq(t, "viewer's buttons", viewer.count("[data-testid=approve], [data-testid=reject], [data-testid=release]"), 0)

	op := newBrowser(t, s.srv.URL)
	wantEq(t, "operator sign-in page", op.open("/ui/sign-in"), 200)
	wantEq(t, "operator sign in", op.signIn(s.operator), 200)
	wantEq(t, "operator overview", op.open("/ui/"), 200)
	op.shot("20-overview-held")
	// rowButton finds the button of one row by the resource it shows.
	rowButton := func(table, resource, button string) string {
		return `//table[@data-testid="` + table + `"]//tr[td/a[normalize-space()="` + resource + `"]]//button[@data-testid="` + button + `"]`
	}
	click := func(what, xpath string) {
		t.Helper()
		wantEq(t, what, op.load(what, chromedp.Click(chromedp.Search(xpath))), 200)
		wantEq(t, what+": back on the overview", op.location(), s.srv.URL+"/ui/")
	}
	click("approve", rowButton("held-runs", "prod/browser-a", "approve"))
	if f := op.text("[data-testid=flash]"); !strings.Contains(strings.ToLower(f), "approved") {
		t.Fatalf("flash after approve: %q", f)
	}
	click("reject", rowButton("held-runs", "prod/browser-b", "reject"))
	if f := op.text("[data-testid=flash]"); !strings.Contains(strings.ToLower(f), "reject") {
		t.Fatalf("flash after reject: %q", f)
	}
	click("release", rowButton("quarantined", "app/browser-quarantined", "release"))
	if f := op.text("[data-testid=flash]"); !strings.Contains(strings.ToLower(f), "released") {
		t.Fatalf("flash after release: %q", f)
	}
	op.shot("21-overview-after-held-actions")
	wantEq(t, "buttons left", op.count("[data-testid=approve], [data-testid=reject], [data-testid=release]"), 0)

	got, err := s.st.RunGet(ctx, approve.ID)
	if err != nil || got.Status == converge.RunHeld || got.Status == converge.RunCancelled {
		t.Fatalf("approved run: %+v, %v", got, err)
	}
	if got, err = s.st.RunGet(ctx, reject.ID); err != nil || got.Status != converge.RunCancelled {
		t.Fatalf("rejected run: %+v, %v", got, err)
	}
	if q, err := s.st.QuarantineList(ctx); err != nil || len(q) != 0 {
		t.Fatalf("quarantine after release: %v %v", q, err)
	}
	actions := map[string]bool{}
	for _, a := range s.auditActions(t) {
		if a.Actor == "oncall" {
			actions[a.Action] = true
		}
	}
	for _, want := range []string{"run.approve", "run.reject", "quarantine.release"} {
		if !actions[want] {
			t.Errorf("no audit entry %s by the operator: %v", want, actions)
		}
	}
}
