package ui_test

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/source"
)

// githubSecret is the secret of the stack's github source.
const githubSecret = "ui-test-github-secret"

// testSources is the stack's one event source: GitHub pushes to main
// start builds of the repository (version auto); a release starts a
// deploy whose version is the release's id.
var testSources = []converge.SourceDef{{Name: "github", Type: converge.SourceGitHub, Secret: githubSecret, Rules: []converge.SourceRule{
	{When: `headers["x-github-event"] == "push" && body.ref == "refs/heads/main"`, Kind: "build",
		Resource: `body.repository.full_name`, Version: "auto", Payload: `{"sha": body.after}`},
	{When: `headers["x-github-event"] == "release"`, Kind: "deploy",
		Resource: `"prod/" + body.repository.name`, Version: `int(body.release.id)`},
}}}

// nextPage finds the pager's link to the next page.
var nextPage = regexp.MustCompile(`href="(/ui/deliveries\?[^"]*)" data-testid="next-page"`)

// postGitHub posts a signed GitHub delivery to the stack.
func (s *stack) postGitHub(t *testing.T, event, body string) (int, string) {
	t.Helper()
	id := uuid.NewString()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, s.srv.URL+"/hooks/github", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-GitHub-Event", event)
	req.Header.Set("X-GitHub-Delivery", id)
	req.Header.Set("X-Hub-Signature-256", source.SignGitHub([]byte(githubSecret), []byte(body)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode, id
}

// postDeliveries posts an accepted push, an ignored push (another branch)
// and a rejected release (its id is not a number), and returns their
// GitHub delivery ids in that order.
func (s *stack) postDeliveries(t *testing.T) (accepted, ignored, rejected string) {
	t.Helper()
	var status int
	status, accepted = s.postGitHub(t, "push", `{"ref":"refs/heads/main","after":"9f3c2e1","repository":{"full_name":"octo/hello","name":"hello"}}`)
	if status != http.StatusAccepted {
		t.Fatalf("accepted push: %d", status)
	}
	status, ignored = s.postGitHub(t, "push", `{"ref":"refs/heads/topic","after":"1111111","repository":{"full_name":"octo/hello","name":"hello"}}`)
	if status != http.StatusAccepted {
		t.Fatalf("ignored push: %d", status)
	}
	status, rejected = s.postGitHub(t, "release", `{"action":"published","release":{"id":"v1.2.0"},"repository":{"full_name":"octo/hello","name":"hello"}}`)
	if status != http.StatusUnprocessableEntity {
		t.Fatalf("rejected release: %d", status)
	}
	return accepted, ignored, rejected
}

// TestDashboardDeliveries: the deliveries list filters by source and
// status and pages; a delivery's page shows its matched rules, links to
// what it started, and what each rule would start for its stored body;
// the navigation links the list.
func TestDashboardDeliveries(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	accepted, ignored, rejected := s.postDeliveries(t)

	c := newClient(t, s.srv.URL)
	c.signIn(s.viewer)
	resp, body := c.get("/ui/")
	wantStatus(t, "overview", resp, body, http.StatusOK)
	wantContains(t, "overview", body, `href="/ui/deliveries"`)

	resp, body = c.get("/ui/deliveries")
	wantStatus(t, "deliveries", resp, body, http.StatusOK)
	wantContains(t, "deliveries", body, accepted, ignored, rejected, `<option>github</option>`)
	if n := strings.Count(body, `data-testid="delivery-row"`); n != 3 {
		t.Errorf("deliveries: %d rows, want 3", n)
	}
	resp, body = c.get("/ui/deliveries?status=rejected")
	wantStatus(t, "rejected deliveries", resp, body, http.StatusOK)
	if n := strings.Count(body, `data-testid="delivery-row"`); n != 1 || !strings.Contains(body, rejected) {
		t.Errorf("status=rejected: %d rows, want the rejected one", n)
	}
	resp, body = c.get("/ui/deliveries?source=gitlab")
	wantStatus(t, "other source", resp, body, http.StatusOK)
	wantContains(t, "other source", body, "No deliveries match.")
	resp, body = c.get("/ui/deliveries?status=bogus")
	wantStatus(t, "bad status", resp, body, http.StatusUnprocessableEntity)
	wantContains(t, "bad status", body, "must be one of accepted, ignored, rejected")

	// Pages of one: newest first, then older, then the last.
	var seen []string
	next := "/ui/deliveries?limit=1"
	for i := 0; next != "" && i < 5; i++ {
		resp, body = c.get(next)
		wantStatus(t, "page "+next, resp, body, http.StatusOK)
		for _, id := range []string{accepted, ignored, rejected} {
			if strings.Contains(body, id) {
				seen = append(seen, id)
			}
		}
		if i > 0 {
			wantContains(t, "page "+next, body, "« First page")
		}
		next = ""
		if m := nextPage.FindStringSubmatch(body); m != nil {
			next = strings.ReplaceAll(m[1], "&amp;", "&")
		}
	}
	if fmt.Sprint(seen) != fmt.Sprint([]string{rejected, ignored, accepted}) {
		t.Errorf("pages of one showed %v, want %v (newest first, each once)", seen, []string{rejected, ignored, accepted})
	}

	list, _, err := s.st.DeliveryList(t.Context(), converge.DeliveryListParams{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]*converge.Delivery{}
	for _, d := range list {
		byID[d.DeliveryID] = d
	}

	// The accepted push: rule 0 matched, its event linked, and rule 0
	// would start a build of octo/hello (version auto) with the sha now.
	d := byID[accepted]
	resp, body = c.get("/ui/deliveries/" + d.ID.String())
	wantStatus(t, "accepted delivery", resp, body, http.StatusOK)
	wantContains(t, "accepted delivery", body, `data-testid="matched-rules">rules[0]`,
		`href="/ui/events/`+d.EventIDs[0].String()+`"`, `data-rule="0" data-matched="true"`, `data-rule="1" data-matched="false"`,
		"octo/hello", ">auto<", "9f3c2e1", "x-github-event")
	if strings.Contains(body, "sha256=") {
		t.Error("the delivery page shows the signature header")
	}
	resp, body = c.get("/ui/events/" + d.EventIDs[0].String())
	wantStatus(t, "started event", resp, body, http.StatusOK)

	// The rejected release names its rule and expression.
	d = byID[rejected]
	resp, body = c.get("/ui/deliveries/" + d.ID.String())
	wantStatus(t, "rejected delivery", resp, body, http.StatusOK)
	wantContains(t, "rejected delivery", body, `data-testid="delivery-error"`, "rules[1].version", `data-testid="rule-error"`)

	// The ignored push: nothing started, no rule matches now either.
	d = byID[ignored]
	resp, body = c.get("/ui/deliveries/" + d.ID.String())
	wantStatus(t, "ignored delivery", resp, body, http.StatusOK)
	wantContains(t, "ignored delivery", body, "no rule matched", `data-rule="0" data-matched="false"`)

	// A delivery recorded before bodies were kept, of a source no longer
	// configured: its page says so.
	old := uuid.New()
	if _, err := s.pool.Exec(t.Context(), `INSERT INTO converge_deliveries (id, source, delivery_id, status) VALUES ($1, 'gitlab', 'old-1', 'ignored')`, old); err != nil {
		t.Fatal(err)
	}
	resp, body = c.get("/ui/deliveries/" + old.String())
	wantStatus(t, "old delivery", resp, body, http.StatusOK)
	wantContains(t, "old delivery", body, "was not kept")

	resp, body = c.get("/ui/deliveries/" + uuid.NewString())
	wantStatus(t, "unknown delivery", resp, body, http.StatusNotFound)
	resp, body = c.get("/ui/deliveries/not-an-id")
	wantStatus(t, "bad delivery id", resp, body, http.StatusNotFound)
	// A path the dashboard does not have: its page still shows who is
	// signed in (the header's Sign out), not a sign-in link.
	resp, body = c.get("/ui/no-such-page")
	wantStatus(t, "unknown page", resp, body, http.StatusNotFound)
	wantContains(t, "unknown page", body, `data-testid="sign-out"`)
}

// TestBrowserDeliveries drives Chromium from the navigation to the
// deliveries, filters them, opens the accepted one and follows its link
// to the event it started.
func TestBrowserDeliveries(t *testing.T) {
	t.Parallel()
	chromiumPath(t)
	s := newStack(t)
	accepted, _, rejected := s.postDeliveries(t)
	b := newBrowser(t, s.srv.URL)
	wantEq(t, "sign-in page", b.open("/ui/sign-in"), 200)
	wantEq(t, "sign in", b.signIn(s.viewer), 200)
	wantEq(t, "deliveries", b.load("deliveries", chromedp.Click(chromedp.CSS(`nav a[href="/ui/deliveries"]`))), 200)
	wantEq(t, "rows", b.count("[data-testid=delivery-row]"), 3)
	b.shot("30-deliveries")

	b.do("choose rejected", chromedp.SetValue(chromedp.CSS(`select[name=status]`), "rejected"))
	wantEq(t, "filter", b.load("filter", chromedp.Click(chromedp.CSS("[data-testid=apply-filter]"))), 200)
	wantEq(t, "rejected rows", b.count("[data-testid=delivery-row]"), 1)
	if !strings.Contains(b.text("[data-testid=delivery-list]"), rejected[:8]) {
		t.Errorf("the filtered list does not show the rejected delivery %s", rejected)
	}
	wantEq(t, "rejected delivery", b.load("open rejected", chromedp.Click(chromedp.CSS("[data-testid=delivery-link]"))), 200)
	if got := b.text("[data-testid=delivery-error]"); !strings.Contains(got, "rules[1].version") {
		t.Errorf("rejected delivery's error %q does not name rules[1].version", got)
	}
	b.shot("31-delivery-rejected")

	wantEq(t, "all deliveries", b.open("/ui/deliveries?status=accepted"), 200)
	wantEq(t, "accepted delivery", b.load("open accepted", chromedp.Click(chromedp.CSS("[data-testid=delivery-link]"))), 200)
	if got := b.text("h1"); !strings.Contains(got, accepted) {
		t.Errorf("delivery page title %q, want the delivery id %s", got, accepted)
	}
	wantEq(t, "matching rules now", b.count(`[data-testid=rule-verdict][data-matched=true]`), 1)
	b.shot("32-delivery-accepted")
	wantEq(t, "started event", b.load("follow event", chromedp.Click(chromedp.CSS("[data-testid=started-event]"))), 200)
	if loc := b.location(); !strings.Contains(loc, "/ui/events/") {
		t.Errorf("the started event's link led to %s", loc)
	}
}
