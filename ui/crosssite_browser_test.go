package ui_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestBrowserCrossSiteLink: a link to a dashboard page from another site
// (a notification's link in a chat or an email, SPEC §12) lands a person
// who is signed in on that page, although the SameSite=Strict session
// cookie (SPEC §9) is left out of a cross-site navigation; a person who
// is not signed in lands on the sign-in form, which goes on to the page.
func TestBrowserCrossSiteLink(t *testing.T) {
	t.Parallel()
	chromiumPath(t)
	s := newStack(t)
	const deep = "/ui/dead-letters?status=discarded"
	// localhost is another site than 127.0.0.1, where the dashboard is.
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<!doctype html><html lang="en"><head><title>chat</title></head><body><a id="go" href="%s">dead letters</a></body></html>`, s.srv.URL+deep)
	}))
	t.Cleanup(other.Close)
	chat := strings.Replace(other.URL, "127.0.0.1", "localhost", 1)

	follow := func(b *browser) {
		t.Helper()
		wantEq(t, "the chat page", b.load("open the chat page", chromedp.Navigate(chat)), 200)
		b.load("follow the link", chromedp.Click(chromedp.CSS("#go")))
	}
	// settle waits for the address to reach want (the bounce page opens
	// it again at once) and its page to have loaded.
	settle := func(b *browser, want string) {
		t.Helper()
		var at string
		for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			if at = b.location(); at == want && eval[bool](b, `document.readyState === "complete" && location.href === `+strconv.Quote(want)) {
				return
			}
		}
		t.Fatalf("at %s, want %s", at, want)
	}

	op := newBrowser(t, s.srv.URL)
	wantEq(t, "sign-in page", op.open("/ui/sign-in"), 200)
	wantEq(t, "sign in", op.signIn(s.operator), 200)
	follow(op)
	settle(op, s.srv.URL+deep)
	if h := op.text("h1"); !strings.Contains(strings.ToLower(h), "dead letter") {
		t.Fatalf("landed on %q, want the dead-letter list", h)
	}

	stranger := newBrowser(t, s.srv.URL)
	follow(stranger)
	settle(stranger, s.srv.URL+"/ui/sign-in?next="+url.QueryEscape(deep))
	stranger.do("type token", chromedp.SetValue(chromedp.CSS("#token"), s.operator))
	stranger.load("sign in", chromedp.Click(chromedp.CSS("[data-testid=sign-in]")))
	settle(stranger, s.srv.URL+deep)
}
