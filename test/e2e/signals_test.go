package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/converge-run/converge/test/cvproc"
	"github.com/converge-run/converge/test/pgtest"
	"github.com/converge-run/converge/test/testkit"
)

// signingSecret is the Standard Webhooks secret of the signing tests (the
// specification's example secret).
const signingSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// signedCall is one call a verifying server received.
type signedCall struct {
	id        string
	timestamp string
	verified  error
	body      map[string]any
	status    int
}

// verifyingServer verifies every call with the Standard Webhooks Go
// library (an implementation independent of converge's) and answers it
// with answer(call number of this webhook-id, body).
type verifyingServer struct {
	srv *httptest.Server
	mu  sync.Mutex
	got []signedCall
}

func newVerifyingServer(t *testing.T, answer func(n int, body map[string]any) int) *verifyingServer {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(signingSecret)
	if err != nil {
		t.Fatal(err)
	}
	v := &verifyingServer{}
	v.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		c := signedCall{id: r.Header.Get("webhook-id"), timestamp: r.Header.Get("webhook-timestamp"), verified: wh.Verify(b, r.Header)}
		_ = json.Unmarshal(b, &c.body)
		v.mu.Lock()
		n := 1
		for _, g := range v.got {
			if g.id == c.id {
				n++
			}
		}
		c.status = answer(n, c.body)
		v.got = append(v.got, c)
		v.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(c.status)
		_, _ = io.WriteString(w, `{}`)
	}))
	t.Cleanup(v.srv.Close)
	return v
}

// failFirstCall is a verifying server's answer that fails the first call of
// every webhook-id (500) and takes its retries (200).
func failFirstCall(n int, _ map[string]any) int {
	if n == 1 {
		return http.StatusInternalServerError
	}
	return http.StatusOK
}

func (v *verifyingServer) calls() []signedCall {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]signedCall(nil), v.got...)
}

// metricValue reads one series of /metrics (-1 when it is missing).
func metricValue(t *testing.T, base, series string) float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindSubmatch(b)
	if m == nil {
		return -1
	}
	f, _ := strconv.ParseFloat(string(m[1]), 64)
	return f
}

// TestSignedTargetCalls runs converge serve with a kind whose HTTP target
// has signing_secret_env: every call verifies with the Standard Webhooks
// library, with the run id as webhook-id on every attempt. Without the
// environment variable, start-up stops naming the key.
func TestSignedTargetCalls(t *testing.T) {
	t.Parallel()
	pgtest.URL(t)
	cvproc.Build(t)
	target := newVerifyingServer(t, func(n int, body map[string]any) int {
		if n == 1 {
			return http.StatusServiceUnavailable // the retry is signed too
		}
		return http.StatusOK
	})
	cfgText := func(db string) string {
		return fmt.Sprintf(`listen: 127.0.0.1:0
database_url: %s
shutdown_timeout: 5s
river: {fetch_poll_interval: 20ms}
kinds:
  build:
    target:
      http: {url: %s/build, timeout: 10s, signing_secret_env: BUILD_SIGNING_SECRET}
    max_attempts: 3
    backoff: {initial: 50ms, max: 200ms}
`, db, target.srv.URL)
	}

	t.Run("missing secret", func(t *testing.T) {
		t.Parallel()
		cfg := testkit.ConfigFile(t, cfgText("postgres://127.0.0.1:1/x"))
		code, _, stderr := run(t, cvproc.Env(), "serve", "--config", cfg)
		if code == 0 || !strings.Contains(stderr, "kinds.build.target.http.signing_secret_env") || !strings.Contains(stderr, "BUILD_SIGNING_SECRET") {
			t.Errorf("serve without BUILD_SIGNING_SECRET: exit %d, stderr %q; want a refusal naming the key", code, stderr)
		}
		bad := cvproc.Env("BUILD_SIGNING_SECRET=not-a-secret!")
		code, _, stderr = run(t, bad, "serve", "--config", cfg)
		if code == 0 || !strings.Contains(stderr, "kinds.build.target.http.signing_secret_env") || strings.Contains(stderr, "not-a-secret!") {
			t.Errorf("serve with a malformed secret: exit %d, stderr %q; want a refusal naming the key, not the value", code, stderr)
		}
	})

	t.Run("calls verify", func(t *testing.T) {
		t.Parallel()
		db := pgtest.NewDatabase(t)
		cfg := testkit.ConfigFile(t, cfgText(db))
		p := start(t, cvproc.Env("CONVERGE_ADMIN_TOKEN="+adminToken, "BUILD_SIGNING_SECRET="+signingSecret), "serve", "--config", cfg)
		c := client{base: p.URL(t, 30*time.Second), token: adminToken}
		id := c.submit(t, "build", "app/signed", 1, map[string]any{"ref": "main"})
		ev := c.waitEvent(t, id, 20*time.Second)
		runID := ev["runs"].([]any)[0].(map[string]any)["id"].(string)
		if ev["status"] != "succeeded" {
			t.Fatalf("event %v", ev)
		}
		calls := target.calls()
		var ours []signedCall
		for _, call := range calls {
			if call.body["resource"] == "app/signed" {
				ours = append(ours, call)
			}
		}
		if len(ours) != 2 {
			t.Fatalf("the target got %d calls for app/signed, want 2 (a 503, then a 200)", len(ours))
		}
		for i, call := range ours {
			if call.verified != nil {
				t.Errorf("call %d does not verify with the Standard Webhooks library: %v", i+1, call.verified)
			}
			if call.id != runID {
				t.Errorf("call %d: webhook-id %q, want the run id %s", i+1, call.id, runID)
			}
		}
	})
}

// notifyConfig is a configuration whose kind build quarantines a stream
// after two failures, with a workflow of one step of kind check (whose
// target is down: its run fails), and one receiver of notifications
// (receiverURL) for every type.
func notifyConfig(db, targetURL, receiverURL, receiverExtra string) string {
	return fmt.Sprintf(`listen: 127.0.0.1:0
database_url: %s
shutdown_timeout: 5s
river: {fetch_poll_interval: 20ms}
ui: {base_url: "https://converge.example.com/"}
kinds:
  build:
    target:
      http: {url: %s/build, timeout: 10s}
    max_attempts: 1
    quarantine_after: 2
  check:
    target:
      http: {url: "http://127.0.0.1:1/check", timeout: 10s}
    max_attempts: 1
workflows:
  ship:
    steps:
      check: {kind: check, resource: "wf/{resource}"}
notifications:
  - url: %s/notify
    secret_env: NOTIFY_SECRET
    on: [dead_letter.created, workflow_run.failed, run.held, stream.quarantined]
%s`, db, targetURL, receiverURL, receiverExtra)
}

// TestNotifications runs converge serve with a receiver of notifications
// that verifies each with the Standard Webhooks library and answers the
// first call of every notification 500, later ones 200: each of the four
// types arrives, signed, with its dashboard link; the retry carries the
// same webhook-id; a held run superseded before the retry makes that
// notification obsolete (not sent again, counted obsolete).
func TestNotifications(t *testing.T) {
	t.Parallel()
	pgtest.URL(t)
	cvproc.Build(t)
	target := newFakeTarget(t)
	receiver := newVerifyingServer(t, failFirstCall)
	db := pgtest.NewDatabase(t)
	cfg := testkit.ConfigFile(t, notifyConfig(db, target.srv.URL, receiver.srv.URL,
		"    backoff: {initial: 3s, max: 4s}\n"))
	p := start(t, cvproc.Env("CONVERGE_ADMIN_TOKEN="+adminToken, "NOTIFY_SECRET="+signingSecret), "serve", "--config", cfg)
	c := client{base: p.URL(t, 30*time.Second), token: adminToken}

	for _, o := range []string{"sent", "failed", "obsolete"} {
		if v := metricValue(t, c.base, `converge_notifications_total{outcome="`+o+`"}`); v != 0 {
			t.Errorf("at start-up converge_notifications_total{outcome=%q} = %v, want 0", o, v)
		}
	}

	// Two failures of app/q: two dead letters, the stream quarantined;
	// version 3 is then accepted held.
	for v := int64(1); v <= 2; v++ {
		ev := c.waitEvent(t, c.submit(t, "build", "app/q", v, map[string]any{"fail": "permanent"}), 20*time.Second)
		if ev["status"] != "failed" {
			t.Fatalf("app/q@%d: %v", v, ev)
		}
	}
	c.submit(t, "build", "app/q", 3, map[string]any{"ref": "main"})
	// A workflow run whose step fails.
	status, wr := c.do(t, http.MethodPost, "/v1/workflow-runs", map[string]any{
		"workflow": "ship", "resource": "app/w", "version": 1})
	if status != http.StatusAccepted && status != http.StatusCreated {
		t.Fatalf("start workflow run: %d %v", status, wr)
	}
	wrID := wr["workflow_run"].(map[string]any)["id"].(string)

	// The held run's notification got its first (500) answer: version 4
	// supersedes the held run (and is held in its turn), so that the
	// retry finds the run no longer held.
	byType := func(typ string) []signedCall {
		var out []signedCall
		for _, call := range receiver.calls() {
			if call.body["type"] == typ {
				out = append(out, call)
			}
		}
		return out
	}
	testkit.WaitFor(t, 20*time.Second, "the run.held notification's first call", func() bool { return len(byType("run.held")) >= 1 })
	c.submit(t, "build", "app/q", 4, map[string]any{"ref": "main"})
	firstHeld := byType("run.held")[0].id

	// Each notification but the obsolete one arrives twice: 500, then 200.
	want := map[string]int{"dead_letter.created": 3, "stream.quarantined": 1, "workflow_run.failed": 1, "run.held": 1}
	testkit.Eventually(t, 30*time.Second, func() (bool, string) {
		for typ, n := range want {
			calls := 2 * n
			if typ == "run.held" {
				calls++ // and the one call of the obsolete notification
			}
			if got := len(byType(typ)); got < calls {
				return false, fmt.Sprintf("%d calls of %s, want %d", got, typ, calls)
			}
		}
		v := metricValue(t, c.base, `converge_notifications_total{outcome="obsolete"}`)
		return v == 1, fmt.Sprintf("obsolete = %v, want 1", v)
	})
	for typ, n := range want {
		calls := byType(typ)
		if typ == "run.held" {
			calls = slices.DeleteFunc(calls, func(c signedCall) bool { return c.id == firstHeld })
		}
		if len(calls) != 2*n {
			t.Errorf("%s: %d calls, want %d (each notification twice)", typ, len(calls), 2*n)
		}
		ids := map[string][]int{}
		for _, call := range calls {
			if call.verified != nil {
				t.Errorf("%s %s does not verify with the Standard Webhooks library: %v", typ, call.id, call.verified)
			}
			ids[call.id] = append(ids[call.id], call.status)
		}
		for id, statuses := range ids {
			if len(statuses) != 2 || statuses[0] != 500 || statuses[1] != 200 {
				t.Errorf("%s webhook-id %s: answers %v, want one 500 and then one 200 with the same webhook-id", typ, id, statuses)
			}
		}
	}
	if n := len(slices.DeleteFunc(byType("run.held"), func(c signedCall) bool { return c.id != firstHeld })); n != 1 {
		t.Errorf("run.held of version 3: %d calls, want 1 (its retry is obsolete: the run was superseded)", n)
	}
	if v := metricValue(t, c.base, `converge_notifications_total{outcome="sent"}`); v != 6 {
		t.Errorf("sent = %v, want 6", v)
	}

	// The bodies: type, timestamp and data with the stream and the
	// dashboard's link.
	for _, call := range receiver.calls() {
		d, _ := call.body["data"].(map[string]any)
		if _, err := time.Parse(time.RFC3339Nano, fmt.Sprint(call.body["timestamp"])); err != nil || d == nil {
			t.Errorf("body %v: want a timestamp and data", call.body)
			continue
		}
		link := fmt.Sprint(d["url"])
		var wantLink string
		switch call.body["type"] {
		case "dead_letter.created":
			wantLink = "https://converge.example.com/ui/dead-letters/" + fmt.Sprint(d["id"])
		case "workflow_run.failed":
			wantLink = "https://converge.example.com/ui/workflow-runs/" + wrID
			if d["id"] != wrID || d["workflow"] != "ship" || d["step"] != "check" || d["resource"] != "app/w" || d["version"] != float64(1) {
				t.Errorf("workflow_run.failed data %v", d)
			}
		case "run.held", "stream.quarantined":
			wantLink = "https://converge.example.com/ui/streams/build/app/q"
			if d["kind"] != "build" || d["resource"] != "app/q" {
				t.Errorf("%s data %v", call.body["type"], d)
			}
		}
		if link != wantLink {
			t.Errorf("%s: url %q, want %q", call.body["type"], link, wantLink)
		}
	}
}

// TestNotificationReceiverDown runs converge serve with a receiver that
// never answers in time (slack format, two attempts of 4s each): runs
// finish well before one attempt's timeout, and the notification counts
// failed after its attempts, never a dead letter.
func TestNotificationReceiverDown(t *testing.T) {
	t.Parallel()
	pgtest.URL(t)
	cvproc.Build(t)
	target := newFakeTarget(t)
	release := make(chan struct{})
	var mu sync.Mutex
	var bodies []map[string]any
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		b, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(b, &body)
		mu.Lock()
		bodies = append(bodies, body)
		mu.Unlock()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(release); hang.Close() })
	db := pgtest.NewDatabase(t)
	cfg := testkit.ConfigFile(t, notifyConfig(db, target.srv.URL, hang.URL,
		"    format: slack\n    timeout: 4s\n    max_attempts: 2\n    backoff: {initial: 100ms, max: 200ms}\n"))
	p := start(t, cvproc.Env("CONVERGE_ADMIN_TOKEN="+adminToken, "NOTIFY_SECRET="+signingSecret), "serve", "--config", cfg)
	c := client{base: p.URL(t, 30*time.Second), token: adminToken}

	started := time.Now()
	failed := c.waitEvent(t, c.submit(t, "build", "app/down", 1, map[string]any{"fail": "permanent"}), 20*time.Second)
	ok := c.waitEvent(t, c.submit(t, "build", "app/up", 1, map[string]any{"ref": "main"}), 20*time.Second)
	if took := time.Since(started); took > 3*time.Second || failed["status"] != "failed" || ok["status"] != "succeeded" {
		t.Errorf("with the receiver down, a failing and a succeeding run took %s (%v, %v); want them done well within the receiver's 4s timeout",
			took, failed["status"], ok["status"])
	}
	testkit.Eventually(t, 30*time.Second, func() (bool, string) {
		v := metricValue(t, c.base, `converge_notifications_total{outcome="failed"}`)
		return v == 1, fmt.Sprintf("failed = %v, want 1", v)
	})
	mu.Lock()
	defer mu.Unlock()
	if len(bodies) != 2 {
		t.Errorf("the receiver got %d calls, want 2 (max_attempts)", len(bodies))
	}
	for _, b := range bodies {
		text, _ := b["text"].(string)
		if len(b) != 1 || !strings.Contains(text, "build app/down@1") || !strings.Contains(text, "http://") && !strings.Contains(text, "https://") {
			t.Errorf("slack body %v: want one text line naming the stream and a link", b)
		}
	}
	status, dl := c.do(t, http.MethodGet, "/v1/dead-letters?status=open", nil)
	if status != 200 {
		t.Fatalf("list dead letters: %d", status)
	}
	if items, _ := dl["items"].([]any); len(items) != 1 {
		t.Errorf("%d open dead letters, want 1 (the run's; a failed notification is none)", len(items))
	}
}

// TestUnsignedNotificationIDs: a receiver without secret_env gets no
// signature, but still webhook-id (the notification's id, the same on its
// retry) and webhook-timestamp, so that it can drop a retry it has seen.
func TestUnsignedNotificationIDs(t *testing.T) {
	t.Parallel()
	pgtest.URL(t)
	cvproc.Build(t)
	target := newFakeTarget(t)
	receiver := newVerifyingServer(t, failFirstCall)
	db := pgtest.NewDatabase(t)
	conf := strings.Replace(notifyConfig(db, target.srv.URL, receiver.srv.URL, "    backoff: {initial: 100ms, max: 200ms}\n"),
		"    secret_env: NOTIFY_SECRET\n", "", 1)
	p := start(t, cvproc.Env("CONVERGE_ADMIN_TOKEN="+adminToken), "serve", "--config", testkit.ConfigFile(t, conf))
	c := client{base: p.URL(t, 30*time.Second), token: adminToken}
	if ev := c.waitEvent(t, c.submit(t, "build", "app/unsigned", 1, map[string]any{"fail": "permanent"}), 20*time.Second); ev["status"] != "failed" {
		t.Fatalf("app/unsigned@1: %v", ev)
	}
	var created []signedCall
	testkit.Eventually(t, 30*time.Second, func() (bool, string) {
		created = created[:0]
		for _, call := range receiver.calls() {
			if call.body["type"] == "dead_letter.created" {
				created = append(created, call)
			}
		}
		return len(created) == 2, fmt.Sprintf("%d dead_letter.created calls, want 2 (a 500, then its retry)", len(created))
	})
	for i, call := range created {
		if _, err := uuid.Parse(call.id); err != nil || call.id != created[0].id {
			t.Errorf("call %d: webhook-id %q, want the same notification id on both", i+1, call.id)
		}
		if ts, err := strconv.ParseInt(call.timestamp, 10, 64); err != nil || time.Since(time.Unix(ts, 0)).Abs() > time.Minute {
			t.Errorf("call %d: webhook-timestamp %q, want the time of the call in seconds", i+1, call.timestamp)
		}
		if call.verified == nil {
			t.Errorf("call %d verified without a secret configured", i+1)
		}
	}
}

// TestSourceTestCommand runs `converge source test` on GitHub's
// deliveries (api/testdata/github) with no database and no secret set:
// it prints which rules match and what each would start, --json says the
// same as JSON, a failing expression exits 1 naming the rule, and a
// missing --file is a usage error.
func TestSourceTestCommand(t *testing.T) {
	t.Parallel()
	cvproc.Build(t)
	cfg := testkit.ConfigFile(t, `kinds:
  build:
    target: {http: {url: "http://127.0.0.1:9/build"}}
  deploy:
    target: {http: {url: "http://127.0.0.1:9/deploy"}}
sources:
  github:
    type: github
    secret_env: GITHUB_WEBHOOK_SECRET
    rules:
      - when: 'headers["x-github-event"] == "push" && body.ref == "refs/heads/main"'
        kind: build
        resource: 'body.repository.full_name'
        version: auto
        payload: '{"sha": body.after}'
      - when: 'headers["x-github-event"] == "release"'
        kind: deploy
        resource: '"prod/" + body.repository.name'
        version: 'int(body.release.tag_name)'
`)
	fixture := func(name string) string { return filepath.Join("..", "..", "api", "testdata", "github", name+".json") }
	env := cvproc.Env() // no DATABASE_URL, no GITHUB_WEBHOOK_SECRET

	code, stdout, stderr := run(t, env, "source", "test", "github", "--config", cfg, "--file", fixture("push"), "--header", "X-GitHub-Event=push")
	if code != 0 || !strings.Contains(stdout, "would be accepted") || !regexp.MustCompile(`rules\[0\]\s+yes\s+kind build\s+acme/web\s+auto\s+\{"sha":"7c1f3e2d`).MatchString(stdout) ||
		!regexp.MustCompile(`rules\[1\]\s+no\s+kind deploy`).MatchString(stdout) {
		t.Errorf("source test push: exit %d\n%s%s", code, stdout, stderr)
	}

	code, stdout, stderr = run(t, env, "source", "test", "github", "--config", cfg, "--file", fixture("push"), "--header", "x-github-event=push", "--json")
	var res struct {
		Status string `json:"status"`
		Rules  []struct {
			Rule        int            `json:"rule"`
			Matched     bool           `json:"matched"`
			Resource    string         `json:"resource"`
			VersionAuto bool           `json:"version_auto"`
			Payload     map[string]any `json:"payload"`
		} `json:"rules"`
	}
	if err := json.Unmarshal([]byte(stdout), &res); code != 0 || err != nil || res.Status != "accepted" || len(res.Rules) != 2 ||
		!res.Rules[0].Matched || res.Rules[0].Resource != "acme/web" || !res.Rules[0].VersionAuto || res.Rules[1].Matched ||
		res.Rules[0].Payload["sha"] != "7c1f3e2d9a8b4c5d6e7f8091a2b3c4d5e6f70819" {
		t.Errorf("source test --json: exit %d, %v\n%s%s", code, err, stdout, stderr)
	}

	code, stdout, stderr = run(t, env, "source", "test", "github", "--config", cfg, "--file", fixture("release"), "--header", "x-github-event=release")
	if code != 1 || !strings.Contains(stdout, "would be rejected") || !strings.Contains(stdout, "rules[1].version") || !strings.Contains(stderr, "mapping-failed") {
		t.Errorf("source test release (a failing version): exit %d, want 1 naming rules[1].version\n%s%s", code, stdout, stderr)
	}
	code, stdout, _ = run(t, env, "source", "test", "github", "--config", cfg, "--file", fixture("ping"), "--header", "x-github-event=ping")
	if code != 0 || !strings.Contains(stdout, "would be ignored") {
		t.Errorf("source test ping (a delivery no rule matches): exit %d\n%s", code, stdout)
	}
	code, _, stderr = run(t, env, "source", "test", "gitlab", "--config", cfg, "--file", fixture("push"))
	if code != 1 || !strings.Contains(stderr, `no source "gitlab"`) || !strings.Contains(stderr, "github") {
		t.Errorf("source test of an unknown source: exit %d, %q", code, stderr)
	}
	if code, _, stderr = run(t, env, "source", "test", "github", "--config", cfg); code != 2 || !strings.Contains(stderr, "--file") {
		t.Errorf("source test without --file: exit %d, %q; want a usage error", code, stderr)
	}
	if code, _, stderr = run(t, env, "source", "test", "github", "--config", cfg, "--file", fixture("push"), "--header", "nonsense"); code != 2 {
		t.Errorf("source test --header nonsense: exit %d, %q; want a usage error", code, stderr)
	}
}

// TestSourceDeliveriesCommand posts GitHub's push delivery to converge
// serve, signed as GitHub signs: it is counted in /metrics by source, and
// read back with `converge source deliveries` and `converge source
// delivery`.
func TestSourceDeliveriesCommand(t *testing.T) {
	t.Parallel()
	pgtest.URL(t)
	cvproc.Build(t)
	target := newFakeTarget(t)
	db := pgtest.NewDatabase(t)
	cfg := testkit.ConfigFile(t, serveConfig(db, target.srv.URL, "5s")+`sources:
  github:
    type: github
    secret_env: GITHUB_WEBHOOK_SECRET
    rules:
      - when: 'headers["x-github-event"] == "push" && body.ref == "refs/heads/main"'
        kind: build
        resource: 'body.repository.full_name'
        version: auto
`)
	const secret = "e2e-github-secret"
	p := start(t, cvproc.Env("CONVERGE_ADMIN_TOKEN="+adminToken, "GITHUB_WEBHOOK_SECRET="+secret), "serve", "--config", cfg)
	base := p.URL(t, 30*time.Second)
	body, err := os.ReadFile(filepath.Join("..", "..", "api", "testdata", "github", "push.json"))
	if err != nil {
		t.Fatal(err)
	}
	if status := testkit.PostGitHubPush(t, base+"/hooks/github", secret, "72d3162e-cc78-11e3-81ab-4c9367dc0958", body); status != http.StatusAccepted {
		t.Fatalf("post the push: %d", status)
	}
	// Counted once, by source, with its event; the other statuses at zero.
	for series, want := range map[string]float64{
		`converge_deliveries_total{source="github",status="accepted"}`: 1,
		`converge_deliveries_total{source="github",status="ignored"}`:  0,
		`converge_deliveries_total{source="github",status="rejected"}`: 0,
		`converge_events_accepted_total{kind="build",source="github"}`: 1,
	} {
		if got := metricValue(t, base, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}

	flags := []string{"--url", base, "--token", adminToken}
	code, stdout, stderr := run(t, cvproc.Env(), append([]string{"source", "deliveries", "--source", "github"}, flags...)...)
	m := regexp.MustCompile(`(?m)^([0-9a-f-]{36})\s+\S+\s+github\s+72d3162e-cc78-11e3-81ab-4c9367dc0958\s+accepted\s+rules\[0\]\s+1$`).FindStringSubmatch(stdout)
	if code != 0 || m == nil {
		t.Fatalf("source deliveries: exit %d\n%s%s", code, stdout, stderr)
	}
	code, stdout, stderr = run(t, cvproc.Env(), append([]string{"source", "delivery", m[1]}, flags...)...)
	if code != 0 || !regexp.MustCompile(`status\s+accepted`).MatchString(stdout) || !regexp.MustCompile(`event\s+[0-9a-f-]{36}`).MatchString(stdout) {
		t.Errorf("source delivery: exit %d\n%s%s", code, stdout, stderr)
	}
	if code, _, stderr = run(t, cvproc.Env(), append([]string{"source", "deliveries", "--status", "maybe"}, flags...)...); code != 2 || !strings.Contains(stderr, "status") {
		t.Errorf("source deliveries --status maybe: exit %d, %q; want a usage error naming status", code, stderr)
	}
}
