package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/converge-run/converge/api"
	"github.com/converge-run/converge/store"
	"github.com/converge-run/converge/telemetry"
	"github.com/converge-run/converge/test/pgtest"
	"github.com/converge-run/converge/test/testkit"
)

// TestHTTPServerTimeouts checks that the API's server has every timeout
// set, and that a client sending its headers slowly (slowloris) is cut off
// at ReadHeaderTimeout, long before it is done, and a client sending its
// body slowly at ReadTimeout.
func TestHTTPServerTimeouts(t *testing.T) {
	t.Parallel()
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, "ok")
	})
	srv := newHTTPServer(handler, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	for name, d := range map[string]time.Duration{
		"ReadHeaderTimeout": srv.ReadHeaderTimeout, "ReadTimeout": srv.ReadTimeout,
		"WriteTimeout": srv.WriteTimeout, "IdleTimeout": srv.IdleTimeout,
	} {
		if d <= 0 || d > 2*time.Minute {
			t.Errorf("%s = %s, want set, at most 2m", name, d)
		}
	}
	if srv.ReadHeaderTimeout > 10*time.Second {
		t.Errorf("ReadHeaderTimeout = %s, want at most 10s", srv.ReadHeaderTimeout)
	}
	if srv.MaxHeaderBytes <= 0 || srv.MaxHeaderBytes > 1<<20 {
		t.Errorf("MaxHeaderBytes = %d, want set, at most 1 MiB", srv.MaxHeaderBytes)
	}

	// The same server with short timeouts, so that the test is quick.
	srv.ReadHeaderTimeout = 300 * time.Millisecond
	srv.ReadTimeout = 600 * time.Millisecond
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	// slowDrip writes head, then one byte of drip every 100ms for up to 10s,
	// and returns how long the server kept the connection.
	slowDrip := func(t *testing.T, head, drip string) time.Duration {
		t.Helper()
		conn, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		start := time.Now()
		closed := make(chan time.Duration, 1)
		go func() {
			_ = conn.SetReadDeadline(time.Now().Add(15 * time.Second))
			_, _ = io.Copy(io.Discard, conn) // until the server closes
			closed <- time.Since(start)
		}()
		if _, err := io.WriteString(conn, head); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 100; i++ {
			select {
			case d := <-closed:
				return d
			case <-time.After(100 * time.Millisecond):
			}
			if _, err := io.WriteString(conn, drip[i%len(drip):i%len(drip)+1]); err != nil {
				return time.Since(start) // the server closed the connection
			}
		}
		return time.Since(start)
	}
	t.Run("slow headers", func(t *testing.T) {
		if d := slowDrip(t, "GET /healthz HTTP/1.1\r\nHost: converge\r\n", "X-Slow: aaaaaaaaaaaaaaaaaaaaaaa\r\n"); d > 3*time.Second {
			t.Errorf("a client sending headers slowly kept the connection %s; ReadHeaderTimeout is 300ms", d)
		}
	})
	t.Run("slow body", func(t *testing.T) {
		if d := slowDrip(t, "POST /x HTTP/1.1\r\nHost: converge\r\nContent-Length: 1000\r\n\r\n", "a"); d > 3*time.Second {
			t.Errorf("a client sending its body slowly kept the connection %s; ReadTimeout is 600ms", d)
		}
	})
	t.Run("a normal request still works", func(t *testing.T) {
		resp, err := http.Get("http://" + ln.Addr().String() + "/")
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("status %d", resp.StatusCode)
		}
	})
}

// TestRateLimitConfig checks that rate_limit in the configuration limits
// each token, with 429 rate-limited and Retry-After, and that without it
// (the default, and `converge dev`) there is no limit.
func TestRateLimitConfig(t *testing.T) {
	t.Parallel()
	databaseURL := pgtest.URL(t)
	admin := store.NewTokenSecret()
	cfg := testkit.ConfigFile(t, "rate_limit: {requests: 3, window: 1m}\n")
	p := secStart(t, map[string]string{"DATABASE_URL": databaseURL, "CONVERGE_ADMIN_TOKEN": admin}, "api", "--config", cfg)
	var last secResponse
	for range 4 {
		last = secDo(t, http.MethodGet, p.url+"/v1/events", admin, "")
	}
	if last.status != http.StatusTooManyRequests || !strings.Contains(last.body, `"urn:converge:problem:rate-limited"`) {
		t.Errorf("4th request = %d %s, want 429 rate-limited", last.status, last.body)
	}
	if got := last.header.Get("Retry-After"); got != "60" {
		t.Errorf("Retry-After = %q, want 60", got)
	}
	if r := secDo(t, http.MethodGet, p.url+"/healthz", "", ""); r.status != http.StatusOK {
		t.Errorf("healthz while limited = %d", r.status)
	}

	t.Run("off by default", func(t *testing.T) {
		t.Parallel()
		p := secStart(t, map[string]string{"DATABASE_URL": databaseURL, "CONVERGE_ADMIN_TOKEN": admin}, "api")
		for i := range 30 {
			if r := secDo(t, http.MethodGet, p.url+"/v1/events", admin, ""); r.status != http.StatusOK {
				t.Fatalf("request %d = %d %s", i+1, r.status, r.body)
			}
		}
	})
	t.Run("off in dev", func(t *testing.T) {
		t.Parallel()
		if testing.Short() {
			t.Skip("dev starts workers and a demo target")
		}
		p := secStart(t, map[string]string{"DATABASE_URL": pgtest.NewDatabase(t), "CONVERGE_ADMIN_TOKEN": admin},
			"dev", "--listen", "127.0.0.1:0", "--demo-latency", "1ms")
		for i := range 30 {
			if r := secDo(t, http.MethodGet, p.url+"/v1/events", admin, ""); r.status != http.StatusOK {
				t.Fatalf("request %d = %d %s", i+1, r.status, r.body)
			}
		}
	})
}

// TestNoSecretInDatabaseErrors runs every command that connects to the
// database with a database URL holding a password, in the environment and
// in a configuration file, where connecting fails in different ways: the
// password never appears in the output or the error.
func TestNoSecretInDatabaseErrors(t *testing.T) {
	t.Parallel()
	const password = "hunter2-Secret-pw"
	real, err := url.Parse(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	urls := map[string]string{
		"connection refused": "postgres://converge:" + password + "@127.0.0.1:1/converge?connect_timeout=2",
		"unknown database":   "postgres://" + real.User.Username() + ":" + password + "@" + real.Host + "/converge_no_such_db?sslmode=disable",
		"unknown host":       "postgres://converge:" + password + "@no-such-host.invalid:5432/converge?connect_timeout=2",
		"bad port":           "postgres://converge:" + password + "@127.0.0.1:99999/converge",
		"bad option":         "postgres://converge:" + password + "@127.0.0.1:1/converge?sslmode=bogus",
		"bad escape":         "postgres://converge:" + password + "%zz@127.0.0.1:1/converge",
		"password in query":  "postgres://127.0.0.1:1/converge?user=converge&password=" + password + "&connect_timeout=2",
	}
	commands := [][]string{
		{"serve"}, {"api"}, {"worker"}, {"migrate", "up", "--wait", "1s"}, {"migrate", "down"}, {"migrate", "status"},
		{"token", "list"}, {"token", "create", "--name", "x", "--role", "viewer"}, {"token", "revoke", "--name", "x"},
	}
	for name, u := range urls {
		for _, viaFile := range []bool{false, true} {
			vars := map[string]string{"CONVERGE_LISTEN": "127.0.0.1:0"}
			var cfgArgs []string
			if viaFile {
				cfgArgs = []string{"--config", testkit.ConfigFile(t, "database_url: '"+u+"'\n")}
			} else {
				vars["DATABASE_URL"] = u
			}
			for _, cmd := range commands {
				label := fmt.Sprintf("%s/file=%v/%s", name, viaFile, strings.Join(cmd[:min(2, len(cmd))], " "))
				t.Run(label, func(t *testing.T) {
					t.Parallel()
					if serving := cmd[0] == "serve" || cmd[0] == "api" || cmd[0] == "worker"; serving {
						// SPEC §15: a serving process stays up while the
						// database cannot be reached, retrying and logging
						// why; a URL it cannot parse still stops it.
						stdout, stderr, err := secRunUntil(t, 10*time.Second, []string{"database unavailable", "workers cannot start yet"}, vars, append(cmd, cfgArgs...)...)
						errText := ""
						if err != nil {
							errText = err.Error()
						} else if !strings.Contains(stderr, "database unavailable") && !strings.Contains(stderr, "workers cannot start yet") {
							t.Errorf("stayed up without logging why the database cannot be used:\n%s", stderr)
						}
						secNoSecrets(t, map[string]string{"error": errText, "stdout": stdout, "stderr": stderr}, password)
						return
					}
					stdout, stderr, err := secRun(t, vars, append(cmd, cfgArgs...)...)
					if err == nil {
						t.Fatalf("succeeded with a database that cannot be reached:\n%s", stdout)
					}
					secNoSecrets(t, map[string]string{"error": err.Error(), "stdout": stdout, "stderr": stderr}, password)
				})
			}
		}
	}
}

// TestNoSecretInTargetErrors runs the whole service against HTTP targets
// configured with secrets (headers, a password and a token in the URL)
// that fail in every way: answering an error that repeats the credentials,
// refusing the connection, timing out. The secrets appear nowhere: not in
// the logs, the API's answers, the dead letters or the CLI's output.
func TestNoSecretInTargetErrors(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs workers")
	}
	secrets := []string{"hdr-Secret-auth-1", "hdr-Secret-key-2", "url-Secret-pass-3", "url-Secret-query-4"}
	var calls atomic.Int64
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		// A careless target that repeats what it was sent.
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprintf(w, "bad credentials: Authorization=%q X-Api-Key=%q url=%s\n",
			r.Header.Get("Authorization"), r.Header.Get("X-Api-Key"), r.URL.String())
	}))
	t.Cleanup(echo.Close)
	flaky := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Retry-After", "0")
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, `{"error":"upstream down","auth":%q}`, r.Header.Get("Authorization"))
	}))
	t.Cleanup(flaky.Close)
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	}))
	t.Cleanup(slow.Close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := ln.Addr().String()
	_ = ln.Close()

	withCreds := func(base, path string) string {
		u, _ := url.Parse(base + path + "?token=" + secrets[3] + "&x=1")
		u.User = url.UserPassword("svc", secrets[2])
		return u.String()
	}
	kind := func(name, targetURL string) string {
		return fmt.Sprintf(`  %s:
    target:
      http:
        url: %q
        timeout: 300ms
        headers: {Authorization: "Bearer %s", X-Api-Key: %q}
    max_attempts: 2
    backoff: {initial: 1ms, max: 5ms}
`, name, targetURL, secrets[0], secrets[1])
	}
	cfg := testkit.ConfigFile(t, "rescue_after: 2s\nshutdown_timeout: 1s\nkinds:\n"+
		kind("echo", withCreds(echo.URL, "/echo"))+kind("flaky", withCreds(flaky.URL, "/flaky"))+
		kind("refused", withCreds("http://"+refused, "/refused"))+kind("slow", withCreds(slow.URL, "/slow")))
	admin := store.NewTokenSecret()
	vars := map[string]string{"DATABASE_URL": pgtest.NewDatabase(t), "CONVERGE_ADMIN_TOKEN": admin}
	p := secStart(t, vars, "serve", "--config", cfg)

	kinds := []string{"echo", "flaky", "refused", "slow"}
	ids := map[string]string{}
	for _, k := range kinds {
		r := secDo(t, http.MethodPost, p.url+"/v1/events", admin, `{"kind":"`+k+`","resource":"app/web","version":1}`)
		if r.status != http.StatusAccepted {
			t.Fatalf("submit %s = %d %s", k, r.status, r.body)
		}
		var res struct {
			Event struct {
				ID string `json:"id"`
			} `json:"event"`
		}
		if err := json.Unmarshal([]byte(r.body), &res); err != nil {
			t.Fatal(err)
		}
		ids[k] = res.Event.ID
	}
	answers := map[string]string{}
	deadline := time.Now().Add(time.Minute)
	for _, k := range kinds {
		testkit.Eventually(t, time.Until(deadline), func() (bool, string) {
			r := secDo(t, http.MethodGet, p.url+"/v1/events/"+ids[k], admin, "")
			answers["GET /v1/events/{"+k+"}"] = r.body
			return strings.Contains(r.body, `"status":"failed"`), fmt.Sprintf("event %s did not fail in time: %s", k, r.body)
		})
	}
	if calls.Load() == 0 {
		t.Fatal("no target was called")
	}
	list := secDo(t, http.MethodGet, p.url+"/v1/dead-letters?status=open", admin, "")
	answers["GET /v1/dead-letters"] = list.body
	var dls struct {
		Items []struct {
			ID string `json:"id"`
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(list.body), &dls); err != nil || len(dls.Items) != len(kinds) {
		t.Fatalf("dead letters: %v %s", err, list.body)
	}
	for _, dl := range dls.Items {
		answers["GET /v1/dead-letters/"+dl.ID] = secDo(t, http.MethodGet, p.url+"/v1/dead-letters/"+dl.ID, admin, "").body
		stdout, stderr, err := secRun(t, map[string]string{"CONVERGE_URL": p.url, "CONVERGE_TOKEN": admin}, "dlq", "show", dl.ID)
		if err != nil {
			t.Errorf("dlq show: %v %s", err, stderr)
		}
		answers["dlq show "+dl.ID] = stdout + stderr
	}
	stdout, stderr, err := secRun(t, map[string]string{"CONVERGE_URL": p.url, "CONVERGE_TOKEN": admin}, "dlq", "list", "--json")
	if err != nil {
		t.Errorf("dlq list: %v %s", err, stderr)
	}
	answers["dlq list"] = stdout + stderr
	// The errors are there, only without the secrets.
	if !strings.Contains(answers["GET /v1/events/{echo}"], "401 Unauthorized") ||
		!strings.Contains(answers["GET /v1/events/{refused}"], "refused") {
		t.Errorf("the failures are not described:\n%s\n%s", answers["GET /v1/events/{echo}"], answers["GET /v1/events/{refused}"])
	}
	p.stop()
	answers["logs"] = p.logs.String()
	answers["stdout"] = p.stdout.String()
	secNoSecrets(t, answers, append(secrets, admin)...)
}

// TestNoSecretInClientErrors runs the API clients (submit, dlq) with a
// token and a URL holding a password, against a server that refuses the
// token and against no server: neither secret appears in their output.
func TestNoSecretInClientErrors(t *testing.T) {
	t.Parallel()
	const token = "cvg_client-Secret-token-0123456789"
	const password = "client-Secret-pw"
	p := secStart(t, map[string]string{"DATABASE_URL": pgtest.URL(t)}, "api")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nobody := "http://" + ln.Addr().String()
	_ = ln.Close()
	withPassword := func(base string) string {
		u, _ := url.Parse(base)
		u.User = url.UserPassword("me", password)
		return u.String()
	}
	commands := [][]string{
		{"submit", "--kind", "build", "--resource", "app/web", "--version", "1"},
		{"dlq", "list"}, {"dlq", "list", "--json"}, {"dlq", "show", "0190f7a2-5f6c-7000-8000-000000000000"},
		{"dlq", "redrive", "0190f7a2-5f6c-7000-8000-000000000000"},
		{"runs", "approve", "0190f7a2-5f6c-7000-8000-000000000000"}, {"quarantine", "list"},
		{"quarantine", "release", "build", "app/web"},
	}
	for _, base := range []string{p.url, withPassword(p.url), nobody, withPassword(nobody)} {
		for _, viaFlag := range []bool{false, true} {
			for _, cmd := range commands {
				args := cmd
				vars := map[string]string{"CONVERGE_URL": base, "CONVERGE_TOKEN": token}
				if viaFlag {
					args = append(append([]string{}, cmd...), "--url", base, "--token", token)
					vars = map[string]string{}
				}
				stdout, stderr, err := secRun(t, vars, args...)
				if err == nil {
					t.Errorf("%v against %s succeeded with a bad token", cmd, base)
				}
				secNoSecrets(t, map[string]string{fmt.Sprintf("%v against %s", cmd, strings.Replace(base, password, "***", 1)): stdout + stderr}, token, password)
			}
		}
	}
	secNoSecrets(t, map[string]string{"API logs": p.logs.String()}, token, password)
}

// TestOpsEndpointsRevealNothing checks that /healthz, /readyz, /metrics and
// /openapi.json answer without a token and hold no token, password or
// database URL, after the API has been used with tokens.
func TestOpsEndpointsRevealNothing(t *testing.T) {
	t.Parallel()
	const password = "ops-Secret-pw"
	u, err := url.Parse(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	// The test server trusts local connections, so a password changes
	// nothing, except that it must not show.
	u.User = url.UserPassword(u.User.Username(), password)
	admin := store.NewTokenSecret()
	vars := map[string]string{"DATABASE_URL": u.String(), "CONVERGE_ADMIN_TOKEN": admin}
	token := tokCreate(t, vars, tokTestName("ops"), "viewer")
	p := secStart(t, vars, "serve")
	for _, tok := range []string{admin, token, "cvg_wrong"} {
		secDo(t, http.MethodGet, p.url+"/v1/dead-letters", tok, "")
		secDo(t, http.MethodPost, p.url+"/v1/events", tok, `{"kind":"build","resource":"app/ops","version":1}`)
	}
	bodies := map[string]string{}
	for _, path := range []string{"/healthz", "/readyz", "/metrics", "/openapi.json"} {
		r := secDo(t, http.MethodGet, p.url+path, "", "")
		if r.status != http.StatusOK {
			t.Errorf("GET %s without a token = %d %s", path, r.status, r.body)
		}
		var headers strings.Builder
		_ = r.header.Write(&headers)
		bodies[path] = headers.String() + "\n" + r.body
	}
	if !strings.Contains(bodies["/metrics"], "go_goroutines") {
		t.Errorf("/metrics does not look like Prometheus metrics:\n%.500s", bodies["/metrics"])
	}
	secNoSecrets(t, bodies, admin, token, password, u.String(), "postgres://", u.Host+"/"+strings.TrimPrefix(u.Path, "/"))
	// Nor the process's own logs.
	secNoSecrets(t, map[string]string{"logs": p.logs.String()}, admin, token, password)
	if !strings.Contains(p.logs.String(), `"msg":"listening"`) {
		t.Error("no logs captured")
	}
}

// TestHTTPServerHeadersTooLarge checks, over a real connection, that
// request headers over 64 KiB get 431 headers-too-large as a problem body
// (not net/http's plain text), with an X-Request-Id, and so do headers over
// the http.Server's own MaxHeaderBytes, which net/http refuses to read
// (serveHTTP's api.ProblemListener); and that the 431 of a submission
// (POST /v1/events, POST /hooks/{source}) over 64 KiB, and only of one, is
// counted in converge_events_rejected_total under kind unknown (SPEC §14:
// reason is the problem slug; it stayed at 0).
func TestHTTPServerHeadersTooLarge(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	metrics := telemetry.NewMetrics(reg, telemetry.Labels{Kinds: []string{"build"}, Sources: []string{"github"}})
	srv := newHTTPServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}), slog.New(slog.NewTextHandler(io.Discard, nil)), metrics)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = serveHTTP(srv, ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	for _, c := range []struct {
		method, path string
		size, want   int
	}{
		{http.MethodGet, "/ui/", 60 << 10, http.StatusOK},
		{http.MethodGet, "/ui/", 65 << 10, http.StatusRequestHeaderFieldsTooLarge},
		{http.MethodGet, "/ui/", 200 << 10, http.StatusRequestHeaderFieldsTooLarge},
		{http.MethodGet, "/v1/events", 65 << 10, http.StatusRequestHeaderFieldsTooLarge},
		{http.MethodPost, "/v1/events", 60 << 10, http.StatusOK},
		{http.MethodPost, "/v1/events", 65 << 10, http.StatusRequestHeaderFieldsTooLarge},
		{http.MethodPost, "/hooks/github", 65 << 10, http.StatusRequestHeaderFieldsTooLarge},
	} {
		size, want := c.size, c.want
		req, err := http.NewRequestWithContext(t.Context(), c.method, "http://"+ln.Addr().String()+c.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Big", strings.Repeat("a", size))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s, %d bytes: %v", c.method, c.path, size, err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("%s %s, %d bytes of headers = %d %s, want %d", c.method, c.path, size, resp.StatusCode, body, want)
		}
		if want == http.StatusRequestHeaderFieldsTooLarge &&
			(resp.Header.Get("Content-Type") != "application/problem+json" || !strings.Contains(string(body), "urn:converge:problem:headers-too-large")) {
			t.Errorf("%s %s, %d bytes: %s %q, want a headers-too-large problem", c.method, c.path, size, resp.Header.Get("Content-Type"), body)
		}
		if resp.Header.Get("X-Request-Id") == "" {
			t.Errorf("%s %s, %d bytes: no X-Request-Id", c.method, c.path, size)
		}
	}
	page := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(page, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for series, want := range map[string]string{
		`converge_events_rejected_total{kind="unknown",reason="headers-too-large"}`: "2",
		`converge_events_rejected_total{kind="build",reason="headers-too-large"}`:   "0",
	} {
		if !strings.Contains(page.Body.String(), "\n"+series+" "+want+"\n") {
			t.Errorf("%s, want %s", series, want)
		}
	}
	// Headers past the server's MaxHeaderBytes: net/http stops reading
	// and answers by itself; the client writes on while it reads.
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	go func() {
		_, _ = io.WriteString(conn, "GET /ui/ HTTP/1.1\r\nHost: x\r\n")
		line := "X-Big: " + strings.Repeat("a", 4000) + "\r\n"
		for range (api.ServerMaxHeaderBytes + 512<<10) / len(line) {
			if _, err := io.WriteString(conn, line); err != nil {
				return
			}
		}
		_, _ = io.WriteString(conn, "\r\n")
	}()
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("headers past MaxHeaderBytes: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge || resp.Header.Get("Content-Type") != "application/problem+json" ||
		!strings.Contains(string(body), `"type":"urn:converge:problem:headers-too-large"`) || resp.Header.Get("X-Request-Id") == "" {
		t.Errorf("headers past MaxHeaderBytes = %d %v %q, want a headers-too-large problem with an X-Request-Id", resp.StatusCode, resp.Header, body)
	}
}

// TestHTTPServerUnknownTransferCoding: a request with a transfer coding
// net/http does not know is bad input, answered 400 (net/http's plain 400
// for a request it cannot parse, SPEC §4), not net/http's 501 (G9: bad
// input is never a 5xx).
func TestHTTPServerUnknownTransferCoding(t *testing.T) {
	t.Parallel()
	srv := newHTTPServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}), slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = serveHTTP(srv, ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	for _, te := range []string{"gzip", "chunked, gzip", "identity"} {
		conn, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.WriteString(conn, "POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: "+te+"\r\n\r\n{}")
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("Transfer-Encoding %s: %v", te, err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		_ = conn.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("Transfer-Encoding %s = %d %q, want 400", te, resp.StatusCode, body)
		}
	}
}
