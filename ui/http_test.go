package ui_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/store"
	"github.com/converge-run/converge/test/testkit"
)

// client is a browser stand-in: a cookie jar, no redirects followed.
type client struct {
	t    *testing.T
	base string
	c    *http.Client
}

func newClient(t *testing.T, base string) *client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &client{t: t, base: base, c: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}}
}

// do sends a request and returns the response with its body read.
func (c *client) do(method, path string, form url.Values, header http.Header) (*http.Response, string) {
	c.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(c.t.Context(), method, c.base+path, body)
	if err != nil {
		c.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := c.c.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	return resp, string(b)
}

func (c *client) get(path string) (*http.Response, string) {
	return c.do(http.MethodGet, path, nil, nil)
}

// sameOrigin is what a browser sends with a form posted from our own page.
var sameOrigin = http.Header{"Sec-Fetch-Site": {"same-origin"}}

// signIn signs in with token and checks the redirect.
func (c *client) signIn(token string) {
	c.t.Helper()
	resp, body := c.do(http.MethodPost, "/ui/sign-in", url.Values{"token": {token}, "next": {"/ui/"}}, sameOrigin)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/ui/" {
		c.t.Fatalf("sign in: %d %s, want 303 to /ui/\n%s", resp.StatusCode, resp.Header.Get("Location"), body)
	}
}

var csrfMeta = regexp.MustCompile(`<meta name="csrf-token" content="([^"]+)">`)

// formToken reads the session's form token from a page.
func (c *client) formToken() string {
	c.t.Helper()
	_, body := c.get("/ui/")
	m := csrfMeta.FindStringSubmatch(body)
	if m == nil {
		c.t.Fatalf("no form token on the overview:\n%s", body)
	}
	return m[1]
}

func wantStatus(t *testing.T, what string, resp *http.Response, body string, want int) {
	t.Helper()
	if resp.StatusCode != want {
		t.Fatalf("%s: status %d, want %d\n%s", what, resp.StatusCode, want, body)
	}
}

func wantContains(t *testing.T, what, body string, subs ...string) {
	t.Helper()
	for _, s := range subs {
		if !strings.Contains(body, s) {
			t.Errorf("%s: no %q in the page", what, s)
		}
	}
}

// TestDashboardHTTP checks sessions, roles and the cross-site protection
// over plain HTTP, on one stack.
func TestDashboardHTTP(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	s.waitDeadLetters(t, wantDeadLetters)

	t.Run("signed out", func(t *testing.T) {
		c := newClient(t, s.srv.URL)
		resp, body := c.get("/ui/dead-letters?kind=build")
		wantStatus(t, "overview signed out", resp, body, http.StatusSeeOther)
		if got := resp.Header.Get("Location"); got != "/ui/sign-in?next=%2Fui%2Fdead-letters%3Fkind%3Dbuild" {
			t.Errorf("redirect to %q", got)
		}
		resp, body = c.do(http.MethodPost, "/ui/dead-letters/"+s.deadLetter(t, "build", "app/web").ID.String()+"/discard", url.Values{}, sameOrigin)
		wantStatus(t, "post signed out", resp, body, http.StatusUnauthorized)
		resp, body = c.get("/ui/sign-in")
		wantStatus(t, "sign-in page", resp, body, http.StatusOK)
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") {
			t.Errorf("Content-Security-Policy %q", csp)
		}
	})

	t.Run("sign in", func(t *testing.T) {
		c := newClient(t, s.srv.URL)
		resp, body := c.do(http.MethodPost, "/ui/sign-in", url.Values{"token": {"cvg_nope"}}, sameOrigin)
		wantStatus(t, "bad token", resp, body, http.StatusUnauthorized)
		wantContains(t, "bad token", body, "That token is not valid.")
		resp, body = c.do(http.MethodPost, "/ui/sign-in", url.Values{"token": {s.submitter}}, sameOrigin)
		wantStatus(t, "submitter", resp, body, http.StatusForbidden)
		wantContains(t, "submitter", body, "needs a viewer or operator token")

		resp, body = c.do(http.MethodPost, "/ui/sign-in", url.Values{"token": {s.operator}, "next": {"//evil.example/"}}, sameOrigin)
		wantStatus(t, "operator", resp, body, http.StatusSeeOther)
		if got := resp.Header.Get("Location"); got != "/ui/" {
			t.Errorf("an outside next sent the browser to %q", got)
		}
		cookie := resp.Header.Get("Set-Cookie")
		for _, want := range []string{"converge_session=", "Path=/ui", "HttpOnly", "SameSite=Strict", "Max-Age=43200"} {
			if !strings.Contains(cookie, want) {
				t.Errorf("Set-Cookie %q lacks %s", cookie, want)
			}
		}
		if strings.Contains(cookie, "Secure") {
			t.Errorf("Set-Cookie %q is Secure over plain HTTP", cookie)
		}
		resp, body = c.get("/ui/")
		wantStatus(t, "overview", resp, body, http.StatusOK)
		wantContains(t, "overview", body, "oncall", "operator", "open dead letters")

		tls := newClient(t, s.srv.URL)
		resp, _ = tls.do(http.MethodPost, "/ui/sign-in", url.Values{"token": {s.viewer}},
			http.Header{"X-Forwarded-Proto": {"https"}, "Sec-Fetch-Site": {"same-origin"}})
		if cookie := resp.Header.Get("Set-Cookie"); !strings.Contains(cookie, "Secure") {
			t.Errorf("Set-Cookie %q behind TLS is not Secure", cookie)
		}

		// Sign out ends the session on the server, not only in the browser.
		jarCookies := c.c.Jar.Cookies(mustURL(t, s.srv.URL+"/ui/"))
		resp, body = c.do(http.MethodPost, "/ui/sign-out", url.Values{"csrf_token": {c.formToken()}}, sameOrigin)
		wantStatus(t, "sign out", resp, body, http.StatusSeeOther)
		replay := newClient(t, s.srv.URL)
		replay.c.Jar.SetCookies(mustURL(t, s.srv.URL+"/ui/"), jarCookies)
		resp, body = replay.get("/ui/")
		wantStatus(t, "old cookie after sign-out", resp, body, http.StatusSeeOther)
	})

	t.Run("cross-origin post", func(t *testing.T) {
		c := newClient(t, s.srv.URL)
		c.signIn(s.operator)
		token := c.formToken()
		dl := s.deadLetter(t, "build", "app/worker")
		path := "/ui/dead-letters/" + dl.ID.String() + "/discard"
		form := url.Values{"csrf_token": {token}, "reason": {"forged"}}
		for name, h := range map[string]http.Header{
			"Origin of another site":    {"Origin": {"http://evil.example"}},
			"Sec-Fetch-Site cross-site": {"Sec-Fetch-Site": {"cross-site"}},
			"Sec-Fetch-Site same-site":  {"Sec-Fetch-Site": {"same-site"}, "Origin": {"http://other.127.0.0.1.nip.io"}},
		} {
			resp, body := c.do(http.MethodPost, path, form, h)
			wantStatus(t, name, resp, body, http.StatusForbidden)
			wantContains(t, name, body, "Cross-site requests are not allowed.")
		}
		resp, body := c.do(http.MethodPost, "/ui/sign-in", url.Values{"token": {s.operator}}, http.Header{"Sec-Fetch-Site": {"cross-site"}})
		wantStatus(t, "cross-site sign-in", resp, body, http.StatusForbidden)
		if got, err := s.st.DeadLetterGet(t.Context(), dl.ID); err != nil || got.Status != converge.DeadLetterOpen {
			t.Fatalf("after forged posts: %v %v, want open", got.Status, err)
		}
		// Without the form token, even from our own origin.
		resp, body = c.do(http.MethodPost, path, url.Values{"reason": {"no token"}}, sameOrigin)
		wantStatus(t, "no form token", resp, body, http.StatusForbidden)
		// A reason the API would refuse is refused here too, before it
		// reaches the database, and changes nothing.
		for _, bad := range []string{strings.Repeat("é", 1001), "a\x00b", "\xff"} {
			resp, body = c.do(http.MethodPost, path, url.Values{"csrf_token": {token}, "reason": {bad}}, sameOrigin)
			wantStatus(t, "bad reason", resp, body, http.StatusUnprocessableEntity)
			wantContains(t, "bad reason", body, "reason: must be at most 1000 characters")
		}
		if got, err := s.st.DeadLetterGet(t.Context(), dl.ID); err != nil || got.Status != converge.DeadLetterOpen {
			t.Fatalf("after refused reasons: %v %v, want open", got.Status, err)
		}
		// The same request from our own page works, and is audited.
		resp, body = c.do(http.MethodPost, path, form, sameOrigin)
		wantStatus(t, "same-origin discard", resp, body, http.StatusSeeOther)
		if got, _ := s.st.DeadLetterGet(t.Context(), dl.ID); got.Status != converge.DeadLetterDiscarded || got.ResolvedBy == nil || *got.ResolvedBy != "oncall" {
			t.Fatalf("after discard: %+v", got)
		}
		a := s.auditActions(t)[0]
		if a.Action != "dead_letter.discard" || a.Actor != "oncall" || a.Role != "operator" || a.Reason != "forged" ||
			len(a.Targets) != 1 || a.Targets[0] != dl.ID.String() {
			t.Errorf("audit entry %+v", a)
		}
	})

	t.Run("viewer", func(t *testing.T) {
		c := newClient(t, s.srv.URL)
		c.signIn(s.viewer)
		dl := s.deadLetter(t, "build", "lib/core")
		for _, p := range []string{"/ui/", "/ui/dead-letters", "/ui/dead-letters/" + dl.ID.String(), "/ui/streams/build/lib/core",
			"/ui/events/" + dl.EventID.String(), "/ui/streams"} {
			resp, body := c.get(p)
			wantStatus(t, p, resp, body, http.StatusOK)
			for _, hidden := range []string{`action="/ui/dead-letters/`, `data-testid="bulk"`, `name="id"`, `/cancel"`, "River UI"} {
				if strings.Contains(body, hidden) {
					t.Errorf("viewer sees %q on %s", hidden, p)
				}
			}
		}
		token := c.formToken()
		for _, p := range []string{"/ui/dead-letters/" + dl.ID.String() + "/redrive", "/ui/dead-letters/" + dl.ID.String() + "/discard", "/ui/dead-letters/bulk"} {
			resp, body := c.do(http.MethodPost, p, url.Values{"csrf_token": {token}, "action": {"discard"}, "id": {dl.ID.String()}}, sameOrigin)
			wantStatus(t, "viewer POST "+p, resp, body, http.StatusForbidden)
			wantContains(t, p, body, "This needs the operator role")
		}
		for _, p := range []string{"/ui/dead-letters/confirm?action=discard&id=" + dl.ID.String(), "/ui/river/"} {
			resp, body := c.get(p)
			wantStatus(t, "viewer GET "+p, resp, body, http.StatusForbidden)
		}
		if got, _ := s.st.DeadLetterGet(t.Context(), dl.ID); got.Status != converge.DeadLetterOpen {
			t.Fatalf("a viewer changed dead letter to %s", got.Status)
		}
	})

	t.Run("revoked token ends its sessions", func(t *testing.T) {
		if _, _, err := s.st.TokenCreate(t.Context(), "temp", converge.RoleViewer, converge.AuditEntry{Actor: "admin", Role: "operator"}); err != nil {
			t.Fatal(err)
		}
		tok, _, err := s.st.TokenCreate(t.Context(), "temp2", converge.RoleViewer, converge.AuditEntry{Actor: "admin", Role: "operator"})
		if err != nil {
			t.Fatal(err)
		}
		c := newClient(t, s.srv.URL)
		c.signIn(tok)
		if err := s.st.TokenRevoke(t.Context(), "temp2", converge.AuditEntry{Actor: "admin", Role: "operator"}); err != nil {
			t.Fatal(err)
		}
		resp, body := c.get("/ui/")
		wantStatus(t, "after revoke", resp, body, http.StatusSeeOther)
	})

	t.Run("session expiry", func(t *testing.T) {
		secret, _, err := s.st.SessionCreate(t.Context(), store.SessionCreateParams{
			Actor: converge.Actor{Name: "short", Role: converge.RoleViewer}, TTL: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, 5*time.Second, func() (bool, string) {
			_, err := s.st.SessionGet(t.Context(), secret)
			return errors.Is(err, converge.ErrNotFound), fmt.Sprintf("session still live after its TTL: %v", err)
		})
		c := newClient(t, s.srv.URL)
		c.c.Jar.SetCookies(mustURL(t, s.srv.URL+"/ui/"), []*http.Cookie{{Name: "converge_session", Value: secret, Path: "/ui"}})
		resp, body := c.get("/ui/")
		wantStatus(t, "expired session", resp, body, http.StatusSeeOther)
	})

	t.Run("pagination and skips", func(t *testing.T) {
		c := newClient(t, s.srv.URL)
		c.signIn(s.operator)
		resp, body := c.get("/ui/dead-letters?limit=3")
		wantStatus(t, "first page", resp, body, http.StatusOK)
		m := regexp.MustCompile(`href="([^"]+)" data-testid="next-page"`).FindStringSubmatch(body)
		if m == nil {
			t.Fatalf("no next page link on a page of 3")
		}
		first := regexp.MustCompile(`/ui/dead-letters/[0-9a-f-]{36}`).FindAllString(body, -1)
		resp, body = c.get(strings.ReplaceAll(m[1], "&amp;", "&"))
		wantStatus(t, "second page", resp, body, http.StatusOK)
		second := regexp.MustCompile(`/ui/dead-letters/[0-9a-f-]{36}`).FindAllString(body, -1)
		if len(first) != 3 || len(second) == 0 {
			t.Fatalf("pages of %d and %d dead letters", len(first), len(second))
		}
		for _, id := range second {
			for _, f := range first {
				if id == f {
					t.Fatalf("%s on both pages", id)
				}
			}
		}
		wantContains(t, "second page", body, "First page")

		// A selection with a dead letter no longer open: the dry run says
		// it will be skipped, and why.
		closed, _, err := s.st.DeadLetterList(t.Context(), &converge.DeadLetterListParams{
			DeadLetterFilter: converge.DeadLetterFilter{Status: converge.DeadLetterDiscarded}, Limit: 1})
		if err != nil || len(closed) != 1 {
			t.Fatalf("a discarded dead letter: %v %v", closed, err)
		}
		open := s.deadLetter(t, "build", "app/billing")
		resp, body = c.get("/ui/dead-letters/confirm?action=redrive&id=" + closed[0].ID.String() + "&id=" + open.ID.String())
		wantStatus(t, "confirm with a skip", resp, body, http.StatusOK)
		wantContains(t, "confirm with a skip", body, "Redrive 1 dead letter?", "will be skipped", "no longer open", "app/billing")
		resp, body = c.get("/ui/dead-letters/confirm?action=redrive")
		wantStatus(t, "confirm nothing", resp, body, http.StatusSeeOther)
		if got, _ := s.st.DeadLetterGet(t.Context(), open.ID); got.Status != converge.DeadLetterOpen {
			t.Fatalf("a dry run changed %s to %s", open.ID, got.Status)
		}
	})

	t.Run("failure causes link to their dead letters", func(t *testing.T) {
		c := newClient(t, s.srv.URL)
		c.signIn(s.viewer)
		_, body := c.get("/ui/")
		rows := regexp.MustCompile(`<td class="num"><strong>(\d+)</strong></td><td>(\w+)</td><td class="msg"><a href="([^"]+)"`).FindAllStringSubmatch(body, -1)
		if len(rows) < 2 {
			t.Fatalf("%d failure causes on the overview", len(rows))
		}
		for _, row := range rows {
			_, list := c.get(html.UnescapeString(row[3]))
			if n := strings.Count(list, `data-testid="dead-letter-row"`); fmt.Sprint(n) != row[1] {
				t.Errorf("cause %s of %s links to %d dead letters, want %s", row[3], row[2], n, row[1])
			}
		}
	})

	t.Run("dead-letter filter refuses what the API refuses", func(t *testing.T) {
		c := newClient(t, s.srv.URL)
		c.signIn(s.viewer)
		for _, x := range []struct {
			query string
			// field is the field both refuse; "" when both accept.
			field string
		}{
			{"q=" + url.QueryEscape(strings.Repeat("é", 201)), "q"},
			{"q=" + url.QueryEscape(strings.Repeat("é", 200)), ""},
			{"q=a%00b", "q"},
			{"q=%ff%fe", "q"},
			{"kind=Build", "kind"},
			{"kind=nope%21", "kind"},
			{"kind=build", ""},
			{"resource=%2Fapp", "resource"},
			{"resource=app%20web", "resource"},
			{"status=gone", "status"},
			{"reason=other", "reason"},
			{"since=yesterday", "since"},
			{"since=2026-02-01", "since"},
			{"since=2026-02-01T00:00:00Z&until=2026-01-01T00:00:00Z", "until"},
			{"since=2026-01-01T00:00:00Z&until=2026-02-01T00:00:00%2B01:00", ""},
			{"limit=0", "limit"},
			{"limit=501", "limit"},
			{"cursor=zzz", "cursor"},
		} {
			req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, s.srv.URL+"/v1/dead-letters?"+x.query, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+s.viewer)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var problem struct {
				Errors []converge.FieldError `json:"errors"`
			}
			_ = json.NewDecoder(resp.Body).Decode(&problem)
			resp.Body.Close()
			uiResp, body := c.get("/ui/dead-letters?" + x.query)
			body = html.UnescapeString(body)
			if x.field == "" {
				if resp.StatusCode != http.StatusOK || uiResp.StatusCode != http.StatusOK {
					t.Errorf("%s: API %d, dashboard %d, want both 200", x.query, resp.StatusCode, uiResp.StatusCode)
				}
				continue
			}
			if resp.StatusCode != http.StatusUnprocessableEntity || len(problem.Errors) != 1 || problem.Errors[0].Field != x.field {
				t.Errorf("%s: API %d %+v, want 422 naming %s", x.query, resp.StatusCode, problem.Errors, x.field)
				continue
			}
			wantStatus(t, x.query, uiResp, body, http.StatusUnprocessableEntity)
			wantContains(t, x.query, body, "<strong>"+x.field+"</strong>: "+problem.Errors[0].Message)
		}
		// What the form's datetime-local inputs send (taken as UTC) is the
		// one thing the dashboard reads for the API: as 2026-01-01T00:00:00Z.
		resp, body := c.get("/ui/dead-letters?since=2026-01-01T00%3A00&until=2099-01-01T00%3A00%3A00")
		wantStatus(t, "datetime-local filter", resp, body, http.StatusOK)
		// An RFC 3339 time (a link's) fills the inputs in their own form, in
		// UTC, which a browser keeps (it drops "...Z"), and which reads back
		// as the same instant.
		resp, body = c.get("/ui/dead-letters?since=2026-01-01T01%3A02%3A03%2B01%3A00&until=2099-01-01T00%3A00%3A00.5Z")
		wantStatus(t, "RFC 3339 filter", resp, body, http.StatusOK)
		wantContains(t, "RFC 3339 filter", body, `name="since" type="datetime-local" step="any" value="2026-01-01T00:02:03"`,
			`name="until" type="datetime-local" step="any" value="2099-01-01T00:00:00.500"`)
		resp, body = c.get("/ui/dead-letters?since=2026-01-01T00%3A02%3A03&until=2099-01-01T00%3A00%3A00.500")
		wantStatus(t, "inputs sent back", resp, body, http.StatusOK)
		wantContains(t, "inputs sent back", body, `value="2026-01-01T00:02:03"`, `value="2099-01-01T00:00:00.500"`)
	})

	t.Run("pages", func(t *testing.T) {
		c := newClient(t, s.srv.URL)
		c.signIn(adminToken)
		dl := s.deadLetter(t, "deploy", "prod/web")
		for _, x := range []struct {
			path   string
			status int
			want   []string
		}{
			{"/ui/", 200, []string{"Runs by status", "<svg", "Top failure causes", "manifest invalid: field", "Recent supersessions", "River UI"}},
			{"/ui/dead-letters?kind=deploy&reason=attempts_exhausted&resource=prod%2F&q=upstream&limit=25", 200, []string{"prod/web", "prod/api"}},
			{"/ui/dead-letters?since=yesterday", 422, []string{"not a date and time"}},
			{"/ui/dead-letters?cursor=zzz", 422, []string{"start from the first page"}},
			{"/ui/dead-letters/" + dl.ID.String(), 200, []string{"prod/web", "HTTP 503", "Attempt 2", `&#34;team&#34;: &#34;platform&#34;`, "Redrive"}},
			{"/ui/dead-letters/00000000-0000-7000-8000-000000000000", 404, nil},
			{"/ui/streams/build/app/web", 200, []string{"Event accepted", "by version 3", "Dead-lettered"}},
			{"/ui/streams/build/nope", 404, nil},
			{"/ui/streams/build/app%2Fweb", 200, []string{"Event accepted", "by version 3"}},
			{"/ui/streams/build/app%2Fnope", 404, nil},
			{"/ui/streams?kind=build&resource=app%2Fweb", 303, nil},
			{"/ui/events/" + dl.EventID.String(), 200, []string{"Run #1", "Attempt 2"}},
			{"/ui/dead-letters/confirm?action=redrive&scope=all&kind=deploy", 200, []string{"Redrive 3 dead letters?"}},
			{"/ui/static/style.css", 200, []string{":root"}},
			{"/ui/river/", 200, []string{"<html"}},
			{"/ui/nowhere", 404, nil},
			{"/ui", 200, []string{"Overview"}},
		} {
			resp, body := c.get(x.path)
			wantStatus(t, x.path, resp, body, x.status)
			wantContains(t, x.path, body, x.want...)
		}
		// River UI is read-only: its API's writes, with an operator's
		// session and the same origin, are 405 (they would bypass the
		// audit log and converge's fencing), its reads are served.
		resp, body := c.get("/ui/river/api/jobs?state=available&limit=1")
		wantStatus(t, "river ui jobs", resp, body, http.StatusOK)
		for _, w := range []struct{ method, path string }{
			{http.MethodPost, "/ui/river/api/jobs/retry"},
			{http.MethodPost, "/ui/river/api/jobs/cancel"},
			{http.MethodPost, "/ui/river/api/jobs/delete"},
			{http.MethodPut, "/ui/river/api/queues/deploy/pause"},
			{http.MethodPatch, "/ui/river/api/queues/deploy"},
		} {
			resp, body := c.do(w.method, w.path, url.Values{"ids": {"1"}}, sameOrigin)
			wantStatus(t, w.method+" "+w.path, resp, body, http.StatusMethodNotAllowed)
			if allow := resp.Header.Get("Allow"); allow != "GET, HEAD" {
				t.Errorf("%s %s: Allow %q, want GET, HEAD", w.method, w.path, allow)
			}
			// River UI's page reads the problem of its own calls.
			if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
				t.Errorf("%s %s: Content-Type %q, want the API's problem", w.method, w.path, ct)
			}
		}
	})
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
