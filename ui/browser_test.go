package ui_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/test/testkit"
)

// chromiumPath finds Chromium (CHROMIUM_PATH overrides). Without one the
// test skips, or fails when TEST_REQUIRE_DB=1 (CI), so that a missing
// browser never passes as a skipped test.
func chromiumPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("CHROMIUM_PATH"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("TEST_REQUIRE_DB") == "1" {
		t.Fatal("no Chromium (chromium, chromium-browser, google-chrome) and TEST_REQUIRE_DB=1: install it (scripts/ensure-deps.sh)")
	}
	t.Skip("no Chromium found; set CHROMIUM_PATH or install chromium")
	return ""
}

// screenshotDir is where the walk saves a screenshot of every page.
func screenshotDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("SCREENSHOT_DIR")
	if dir == "" {
		dir = filepath.Join("..", "test", "artifacts", "screenshots")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("screenshot dir: %v", err)
	}
	return dir
}

// browser drives one Chromium tab.
type browser struct {
	t    *testing.T
	ctx  context.Context
	base string
	dir  string
}

func newBrowser(t *testing.T, base string) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-quic", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 800),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(cancel)
	// The first action starts the browser; it must not run under a
	// timeout.
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 800)); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return &browser{t: t, ctx: ctx, base: base, dir: screenshotDir(t)}
}

// do runs actions with a deadline.
func (b *browser) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

// load runs actions that navigate (a link, a form) and returns the status of
// the page they lead to.
func (b *browser) load(what string, actions ...chromedp.Action[chromedp.Void]) int64 {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	resp, err := chromedp.RunResponse(ctx, actions...)
	if err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
	return resp.Status
}

// open navigates to a dashboard path and returns the page's status.
func (b *browser) open(path string) int64 {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	resp, err := chromedp.Run(ctx, chromedp.NavigateResponse(b.base+path))
	if err != nil {
		b.t.Fatalf("open %s: %v", path, err)
	}
	return resp.Status
}

func value[T any](b *browser, what string, a chromedp.Action[T]) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
	return v
}

// eval evaluates a JavaScript expression in the page.
func eval[T any](b *browser, js string) T {
	b.t.Helper()
	return value(b, js, chromedp.Evaluate[T](js, chromedp.EvalAwaitPromise))
}

func (b *browser) text(sel string) string {
	b.t.Helper()
	return strings.TrimSpace(value(b, "text of "+sel, chromedp.Text(chromedp.CSS(sel))))
}

func (b *browser) count(sel string) int {
	b.t.Helper()
	return eval[int](b, fmt.Sprintf("document.querySelectorAll(%q).length", sel))
}

func (b *browser) location() string {
	b.t.Helper()
	return value(b, "location", chromedp.Location())
}

// shot saves a screenshot of the whole page as name.png.
func (b *browser) shot(name string) {
	b.t.Helper()
	png := value(b, "screenshot "+name, chromedp.Screenshot(chromedp.CSS("html")))
	if err := os.WriteFile(filepath.Join(b.dir, name+".png"), png, 0o644); err != nil {
		b.t.Fatalf("save screenshot: %v", err)
	}
}

func (b *browser) signIn(token string) int64 {
	b.t.Helper()
	b.do("type token", chromedp.SetValue(chromedp.CSS("#token"), token))
	return b.load("sign in", chromedp.Click(chromedp.CSS("[data-testid=sign-in]")))
}

func wantEq[T comparable](t *testing.T, what string, got, want T) {
	t.Helper()
	if got != want {
		t.Fatalf("%s: got %v, want %v", what, got, want)
	}
}

// TestBrowserWalk drives Chromium through the dashboard as people on call
// use it, saving a screenshot of every page under test/artifacts/screenshots.
func TestBrowserWalk(t *testing.T) {
	t.Parallel()
	path := chromiumPath(t)
	t.Logf("chromium: %s", path)
	s := newStack(t)
	s.waitDeadLetters(t, wantDeadLetters)
	// From now on the target succeeds: redriven runs succeed.
	s.succeed.Store(true)
	b := newBrowser(t, s.srv.URL)

	// Signed out, the dashboard sends us to sign in, and back after.
	wantEq(t, "signed-out list", b.open("/ui/dead-letters"), 200)
	if loc := b.location(); !strings.Contains(loc, "/ui/sign-in?next=") {
		t.Fatalf("signed out, landed on %s", loc)
	}
	b.shot("01-sign-in")
	wantEq(t, "wrong token", b.signIn("cvg_wrong"), 401)
	wantEq(t, "error", b.text("[data-testid=sign-in-error]"), "That token is not valid.")
	b.shot("02-sign-in-error")
	wantEq(t, "sign in", b.signIn(s.operator), 200)
	wantEq(t, "after sign-in", b.location(), s.srv.URL+"/ui/dead-letters")
	wantEq(t, "rows", b.count("[data-testid=dead-letter-row]"), wantDeadLetters)
	b.shot("03-dead-letters")

	wantEq(t, "overview", b.open("/ui/"), 200)
	if got := b.text("[data-testid=open-dead-letters] .stat-n"); got != fmt.Sprint(wantDeadLetters) {
		t.Fatalf("overview shows %s open dead letters", got)
	}
	if n := b.count("[data-testid=chart] rect"); n != 24 {
		t.Fatalf("chart has %d bars, want 24", n)
	}
	b.shot("04-overview")

	// Filter the list: deploys whose error mentions "upstream".
	wantEq(t, "list", b.open("/ui/dead-letters"), 200)
	b.do("filter", chromedp.SetValue(chromedp.CSS("select[name=kind]"), "deploy"),
		chromedp.SetValue(chromedp.CSS("input[name=q]"), "upstream"))
	wantEq(t, "apply filter", b.load("apply", chromedp.Click(chromedp.CSS("[data-testid=apply-filter]"))), 200)
	if loc := b.location(); !strings.Contains(loc, "kind=deploy") || !strings.Contains(loc, "q=upstream") {
		t.Fatalf("filtered list at %s", loc)
	}
	kinds := eval[[]string](b, `Array.from(document.querySelectorAll("[data-testid=dead-letter-row] td:nth-child(3)")).map(td => td.textContent.trim())`)
	if len(kinds) != 3 {
		t.Fatalf("filtered list has %d rows, want 3: %v", len(kinds), kinds)
	}
	for _, k := range kinds {
		wantEq(t, "kind of a filtered row", k, "deploy")
	}
	b.shot("05-dead-letters-filtered")

	// Open one and redrive it.
	wantEq(t, "open dead letter", b.load("open", chromedp.Click(chromedp.CSS("[data-testid=dead-letter-link]"))), 200)
	dlID := uuid.MustParse(strings.TrimPrefix(b.location(), s.srv.URL+"/ui/dead-letters/"))
	if p := b.text("[data-testid=payload]"); !strings.Contains(p, `"team": "platform"`) {
		t.Fatalf("payload shown as %q", p)
	}
	wantEq(t, "attempts in the timeline", b.count("[data-testid=attempts] li.tl"), 2)
	if got := b.text("[data-testid=attempts]"); !strings.Contains(got, "HTTP 503") || !strings.Contains(got, "transient_error") {
		t.Fatalf("timeline: %q", got)
	}
	b.shot("06-dead-letter")
	b.do("reason", chromedp.SetValue(chromedp.CSS("#reason"), "upstream fixed"))
	wantEq(t, "redrive", b.load("redrive", chromedp.Click(chromedp.CSS("[data-testid=redrive]"))), 200)
	if f := b.text("[data-testid=flash]"); !strings.HasPrefix(f, "Redriven: run #2") {
		t.Fatalf("flash after redrive: %q", f)
	}
	wantEq(t, "status after redrive", b.text("[data-testid=dl-status]"), "redriven")
	wantEq(t, "actions after redrive", b.count("[data-testid=dl-actions]"), 0)
	b.shot("07-dead-letter-redriven")
	dl, err := s.st.DeadLetterGet(t.Context(), dlID)
	if err != nil || dl.Status != converge.DeadLetterRedriven {
		t.Fatalf("dead letter after redrive: %+v, %v", dl, err)
	}
	if a := s.auditActions(t)[0]; a.Action != "dead_letter.redrive" || a.Actor != "oncall" || a.Reason != "upstream fixed" {
		t.Fatalf("audit after redrive: %+v", a)
	}

	// The redriven run succeeds; the stream's history shows it all.
	waitEventStatus(t, s, dl.EventID, converge.RunSucceeded)
	wantEq(t, "stream", b.load("stream", chromedp.Click(chromedp.CSS("[data-testid=stream-link]"))), 200)
	history := b.text("[data-testid=history]")
	for _, want := range []string{"Event accepted", "Run #1 failed", "Dead-lettered attempts_exhausted", "Dead letter redriven", "by oncall",
		"Run #2 queued by a redrive", "Run #2 succeeded", "Attempt 2 of run #1"} {
		if !strings.Contains(history, want) {
			t.Errorf("stream history lacks %q", want)
		}
	}
	b.shot("08-stream")
	wantEq(t, "event", b.open("/ui/events/"+dl.EventID.String()), 200)
	wantEq(t, "runs on the event page", b.count("[data-testid=run]"), 2)
	b.shot("09-event")
	wantEq(t, "superseded stream", b.open("/ui/streams/build/app/web"), 200)
	if h := b.text("[data-testid=history]"); !strings.Contains(h, "by version 2") || !strings.Contains(h, "by version 3") {
		t.Fatalf("app/web history lacks its supersessions: %q", h)
	}
	b.shot("10-stream-superseded")

	// Bulk-discard three builds, after the confirmation.
	wantEq(t, "builds", b.open("/ui/dead-letters?kind=build"), 200)
	for i := 1; i <= 3; i++ {
		b.do("select", chromedp.Click(chromedp.CSS(fmt.Sprintf("[data-testid=dead-letter-row]:nth-child(%d) input[name=id]", i))))
	}
	wantEq(t, "selection count (script)", b.text("[data-selected-count]"), "3 selected")
	selected := eval[[]string](b, `Array.from(document.querySelectorAll("input[name=id]:checked")).map(i => i.value)`)
	b.shot("11-dead-letters-selected")
	wantEq(t, "confirm", b.load("discard…", chromedp.Click(chromedp.CSS("[data-testid=bulk-discard]"))), 200)
	wantEq(t, "confirm count", b.text("[data-testid=confirm-count]"), "3")
	wantEq(t, "confirm title", b.text("[data-testid=confirm-title]"), "Discard 3 dead letters?")
	b.shot("12-bulk-confirm")
	for _, id := range selected {
		if d, _ := s.st.DeadLetterGet(t.Context(), uuid.MustParse(id)); d.Status != converge.DeadLetterOpen {
			t.Fatalf("the dry run changed %s to %s", id, d.Status)
		}
	}
	b.do("reason", chromedp.SetValue(chromedp.CSS("#reason"), "duplicates of the registry outage"))
	wantEq(t, "bulk discard", b.load("confirm", chromedp.Click(chromedp.CSS("[data-testid=confirm-submit]"))), 200)
	wantEq(t, "done", b.text("[data-testid=result-done]"), "3")
	wantEq(t, "skipped", b.text("[data-testid=result-skipped]"), "0")
	b.shot("13-bulk-result")
	for _, id := range selected {
		if d, _ := s.st.DeadLetterGet(t.Context(), uuid.MustParse(id)); d.Status != converge.DeadLetterDiscarded {
			t.Fatalf("after bulk discard %s is %s", id, d.Status)
		}
	}
	if a := s.auditActions(t)[0]; a.Action != "dead_letter.discard" || len(a.Targets) != 3 || a.Reason != "duplicates of the registry outage" {
		t.Fatalf("audit after bulk discard: %+v", a)
	}
	// Confirming "all that match" shows the dry run's count.
	wantEq(t, "builds", b.open("/ui/dead-letters?kind=build"), 200)
	b.do("scope all", chromedp.Click(chromedp.CSS("[data-testid=scope-all]")))
	wantEq(t, "confirm all", b.load("redrive…", chromedp.Click(chromedp.CSS("[data-testid=bulk-redrive]"))), 200)
	wantEq(t, "confirm all count", b.text("[data-testid=confirm-count]"), "2")
	b.shot("14-bulk-confirm-all")

	// A cross-origin form post, with the session cookie, is refused.
	open, _, err := s.st.DeadLetterList(t.Context(), &converge.DeadLetterListParams{
		DeadLetterFilter: converge.DeadLetterFilter{Kind: "build"}, Limit: 1})
	if err != nil || len(open) != 1 {
		t.Fatalf("an open build dead letter: %v %v", open, err)
	}
	victim := open[0]
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<!doctype html><form method="post" action="%s/ui/dead-letters/%s/discard"><input name="reason" value="pwned"></form>
<script>document.forms[0].submit()</script>`, s.srv.URL, victim.ID)
	}))
	defer evil.Close()
	b.do("evil page", chromedp.Navigate(evil.URL))
	b.do("wait for the refusal", chromedp.Poll[chromedp.Void](
		fmt.Sprintf(`location.href.startsWith(%q) && document.body && document.body.innerText.includes("Cross-site requests are not allowed")`, s.srv.URL)))
	b.shot("15-cross-origin-403")
	if d, _ := s.st.DeadLetterGet(t.Context(), victim.ID); d.Status != converge.DeadLetterOpen {
		t.Fatalf("a cross-origin post changed the dead letter to %s", d.Status)
	}

	// Workflow runs: the list, then a fan-out/fan-in run in mixed states
	// (build succeeded, canary running, staging queued, prod pending)
	// drawn as a graph, its boxes linked to their events.
	wf := s.mixedWorkflowRun(t, "shop/web", 7)
	s.workflowStart(t, "shop/api", 3)
	wantEq(t, "workflow runs", b.open("/ui/workflow-runs"), 200)
	wantEq(t, "workflow run rows", b.count("[data-testid=workflow-run-row]"), 2)
	b.shot("workflow-runs")
	wantEq(t, "open workflow run", b.load("workflow run link",
		chromedp.Click(chromedp.CSS(`a[data-testid=workflow-run-link][href="/ui/workflow-runs/`+wf.String()+`"]`))), 200)
	wantEq(t, "steps drawn", b.count("[data-testid=workflow-step]"), 4)
	wantEq(t, "edges drawn", b.count(".wf-edge"), 4)
	left := func(step string) int {
		return eval[int](b, fmt.Sprintf(`Math.round(document.querySelector('[data-step=%q] .wf-box').getBoundingClientRect().left)`, step))
	}
	if l0, l1, l2, l3 := left("build"), left("staging"), left("canary"), left("prod"); !(l0 < l1 && l1 == l2 && l2 < l3) {
		t.Errorf("columns: build %d, staging %d, canary %d, prod %d; want build < staging = canary < prod", l0, l1, l2, l3)
	}
	wantEq(t, "graph fits", eval[bool](b, `document.querySelector("[data-testid=workflow-graph]").getBoundingClientRect().right <= document.documentElement.clientWidth`), true)
	wantEq(t, "cancel button", b.count("[data-testid=cancel-workflow-run]"), 1)
	b.shot("workflow-run")
	wantEq(t, "step event", b.load("step event link", chromedp.Click(chromedp.CSS(`[data-step=build] [data-testid=step-event] text`))), 200)
	wantEq(t, "event links its workflow run", b.count(`[data-testid=event-workflow-run][href="/ui/workflow-runs/`+wf.String()+`"]`), 1)

	// River UI, for operators, behind the same session.
	wantEq(t, "river ui", b.open("/ui/river/"), 200)
	b.do("river ui renders", chromedp.Poll[chromedp.Void](`document.querySelector("#root") && document.querySelector("#root").innerText.length > 20`))
	b.shot("16-river-ui")

	// The same pages on a phone.
	b.do("phone", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile))
	for _, p := range []struct{ name, path string }{
		{"17-phone-overview", "/ui/"}, {"18-phone-dead-letters", "/ui/dead-letters"},
		{"19-phone-dead-letter", "/ui/dead-letters/" + victim.ID.String()}, {"20-phone-stream", "/ui/streams/build/app/web"},
		{"phone-workflow-run", "/ui/workflow-runs/" + wf.String()},
	} {
		wantEq(t, p.path, b.open(p.path), 200)
		if w := eval[int](b, `document.documentElement.scrollWidth`); w > 400 {
			t.Errorf("%s is %dpx wide on a 390px phone", p.path, w)
		}
		b.shot(p.name)
	}
	b.do("desktop", chromedp.EmulateViewport(1280, 800))

	// Sign out: the session is gone.
	wantEq(t, "overview", b.open("/ui/"), 200)
	wantEq(t, "sign out", b.load("sign out", chromedp.Click(chromedp.CSS("[data-testid=sign-out]"))), 200)
	wantEq(t, "after sign-out", b.location(), s.srv.URL+"/ui/sign-in")
	b.shot("21-signed-out")
	b.open("/ui/")
	if loc := b.location(); !strings.Contains(loc, "/ui/sign-in") {
		t.Fatalf("after sign-out /ui/ shows %s", loc)
	}

	// A viewer sees everything, without action controls, and a POST made
	// anyway is refused.
	wantEq(t, "viewer sign in", b.signIn(s.viewer), 200)
	wantEq(t, "viewer list", b.open("/ui/dead-letters"), 200)
	wantEq(t, "viewer rows", b.count("[data-testid=dead-letter-row]"), 4)
	wantEq(t, "viewer checkboxes", b.count("input[name=id]"), 0)
	wantEq(t, "viewer bulk bar", b.count("[data-testid=bulk]"), 0)
	b.shot("22-viewer-dead-letters")
	wantEq(t, "viewer dead letter", b.open("/ui/dead-letters/"+victim.ID.String()), 200)
	wantEq(t, "viewer actions", b.count("[data-testid=dl-actions]")+b.count("form[action*=redrive]")+b.count("form[action*=discard]"), 0)
	b.shot("23-viewer-dead-letter")
	status := eval[int](b, fmt.Sprintf(`fetch("/ui/dead-letters/%s/redrive", {method: "POST", body: new URLSearchParams({
		csrf_token: document.querySelector("meta[name=csrf-token]").content, reason: "viewer"})}).then(r => r.status)`, victim.ID))
	wantEq(t, "viewer POST redrive", status, 403)
	submit := fmt.Sprintf(`(() => {
		const f = document.createElement("form"); f.method = "post"; f.action = "/ui/dead-letters/%s/discard";
		const i = document.createElement("input"); i.name = "csrf_token"; i.value = document.querySelector("meta[name=csrf-token]").content;
		f.appendChild(i); document.body.appendChild(f); f.submit(); return true; })()`, victim.ID)
	wantEq(t, "viewer form post", b.load("viewer form", chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := chromedp.Evaluate[bool](submit)(ctx, tg)
		return err
	})), 403)
	if !strings.Contains(b.text("[data-testid=error]"), "This needs the operator role") {
		t.Fatalf("viewer 403 page: %q", b.text("[data-testid=error]"))
	}
	b.shot("24-viewer-403")
	if d, _ := s.st.DeadLetterGet(t.Context(), victim.ID); d.Status != converge.DeadLetterOpen {
		t.Fatalf("a viewer changed the dead letter to %s", d.Status)
	}
	wantEq(t, "viewer workflow run", b.open("/ui/workflow-runs/"+wf.String()), 200)
	wantEq(t, "viewer graph", b.count("[data-testid=workflow-step]"), 4)
	wantEq(t, "viewer cancel button", b.count("[data-testid=cancel-workflow-run]"), 0)
	status = eval[int](b, fmt.Sprintf(`fetch("/ui/workflow-runs/%s/cancel", {method: "POST", body: new URLSearchParams({
		csrf_token: document.querySelector("meta[name=csrf-token]").content, reason: "viewer"})}).then(r => r.status)`, wf))
	wantEq(t, "viewer POST workflow run cancel", status, 403)
	if w, _ := s.st.WorkflowRunGet(t.Context(), wf); w.Status != converge.WorkflowRunning {
		t.Fatalf("a viewer changed the workflow run to %s", w.Status)
	}
	wantEq(t, "viewer sign out", b.load("sign out", chromedp.Click(chromedp.CSS("[data-testid=sign-out]"))), 200)
}

// waitEventStatus waits until an event's latest run is in status want.
func waitEventStatus(t *testing.T, s *stack, id uuid.UUID, want converge.RunStatus) {
	t.Helper()
	testkit.Eventually(t, 30*time.Second, func() (bool, string) {
		ev, err := s.st.EventGet(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		return ev.Status == want, fmt.Sprintf("event %s is %s, want %s", id, ev.Status, want)
	})
}
