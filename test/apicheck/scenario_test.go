package apicheck_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/converge-run/converge/test/cvproc"
	"github.com/converge-run/converge/test/pgtest"
	"github.com/converge-run/converge/test/testkit"
)

const (
	adminToken = "apicheck-admin-token-abcdefghijklmnop"
	hookSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
)

// scenarioConfig: build (fails on {"fail":"permanent"}, blocks on
// {"block":true}), deploy, flaky (always fails; quarantined after one
// failure), the release workflow with an approval on prod, and a webhook
// source.
func scenarioConfig(databaseURL, targetURL string) string {
	return fmt.Sprintf(`listen: 127.0.0.1:0
database_url: %[1]s
river: {fetch_poll_interval: 20ms}
kinds:
  build:
    target: {http: {url: %[2]s/build, timeout: 20s}}
    max_attempts: 2
    backoff: {initial: 10ms, max: 50ms}
    debounce: 0s
  deploy:
    target: {http: {url: %[2]s/deploy, timeout: 20s}}
    max_attempts: 2
    backoff: {initial: 10ms, max: 50ms}
    debounce: 0s
  flaky:
    target: {http: {url: %[2]s/flaky, timeout: 20s}}
    max_attempts: 1
    debounce: 0s
    quarantine_after: 1
workflows:
  release:
    steps:
      build: {kind: build}
      prod:  {kind: deploy, resource: "prod/{resource}", needs: [build], approval: true}
sources:
  hooks:
    type: webhook
    secret_env: APICHECK_HOOK_SECRET
    rules:
      - when: 'body.action == "built"'
        kind: deploy
        resource: 'body.app'
        version: auto
`, databaseURL, targetURL)
}

// fakeTarget fails /flaky and {"fail":"permanent"} permanently, holds
// {"block":true} until the caller hangs up, and answers anything else 200.
func fakeTarget(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Payload map[string]any `json:"payload"`
		}
		b, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(b, &body)
		switch {
		case strings.HasSuffix(r.URL.Path, "/flaky") || body.Payload["fail"] == "permanent":
			w.WriteHeader(http.StatusUnprocessableEntity)
			_, _ = io.WriteString(w, `{"error":"invalid"}`)
		case body.Payload["block"] == true:
			<-r.Context().Done()
		default:
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"ok":true}`)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// createToken makes a token with the CLI and returns it.
func createToken(t *testing.T, env []string, name, role string) string {
	t.Helper()
	p := cvproc.Start(t, cvproc.Options{Args: []string{"token", "create", "--name", name, "--role", role}, Env: env})
	if code := p.Wait(t, time.Minute); code != 0 {
		t.Fatalf("token create: exit %d: %s", code, p.Stderr())
	}
	return strings.TrimSpace(p.Stdout())
}

func decode(t *testing.T, e exchange) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(e.body, &m); err != nil {
		t.Fatalf("answer %d is not a JSON object: %v: %s", e.status, err, truncate(e.body, 300))
	}
	return m
}

func str(m map[string]any, keys ...string) string {
	var v any = m
	for _, k := range keys {
		mm, _ := v.(map[string]any)
		v = mm[k]
	}
	s, _ := v.(string)
	return s
}

// want fails the test when an answer's status is not one of want.
func want(t *testing.T, what string, e exchange, want ...int) {
	t.Helper()
	for _, w := range want {
		if e.status == w {
			return
		}
	}
	t.Errorf("%s: status %d, want %v: %s", what, e.status, want, truncate(e.body, 300))
}

// TestEveryAnswerMatchesTheDocument runs the real binary and sends every
// operation of its document, as each role, with good and hostile input;
// every answer is validated against the served document by kin-openapi,
// and every operation must have been exercised.
func TestEveryAnswerMatchesTheDocument(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewDatabase(t)
	cfgPath := filepath.Join(t.TempDir(), "converge.yaml")
	if err := os.WriteFile(cfgPath, []byte(scenarioConfig(dbURL, fakeTarget(t))), 0o600); err != nil {
		t.Fatal(err)
	}
	env := cvproc.Env("CONVERGE_CONFIG="+cfgPath, "CONVERGE_ADMIN_TOKEN="+adminToken, "APICHECK_HOOK_SECRET="+hookSecret,
		"DATABASE_URL="+dbURL)
	srv := cvproc.Start(t, cvproc.Options{Args: []string{"serve"}, Env: env})
	base := srv.URL(t, time.Minute)
	cvproc.WaitHTTP(t, base+"/readyz", time.Minute)
	v := newValidator(t, base)
	op := client{t: t, v: v, base: base, token: adminToken}
	viewer := client{t: t, v: v, base: base, token: createToken(t, env, "apicheck-viewer", "viewer")}
	submitter := client{t: t, v: v, base: base, token: createToken(t, env, "apicheck-ci", "submitter")}
	anon := client{t: t, v: v, base: base}

	// Events.
	ev := op.json("POST", "/v1/events", `{"kind":"build","resource":"app/one","version":1,"payload":{"team":"a"}}`)
	want(t, "accept", ev, 202)
	eventID := str(decode(t, ev), "event", "id")
	want(t, "replay", submitter.json("POST", "/v1/events", `{"kind":"build","resource":"app/one","version":1,"payload":{"team":"a"}}`), 200)
	want(t, "version conflict", op.json("POST", "/v1/events", `{"kind":"build","resource":"app/one","version":1,"payload":{"team":"b"}}`), 409)
	want(t, "newer", op.json("POST", "/v1/events", `{"kind":"build","resource":"app/one","version":3}`), 202)
	want(t, "stale", op.json("POST", "/v1/events", `{"kind":"build","resource":"app/one","version":2}`), 409)
	want(t, "malformed", op.send("POST", "/v1/events", "application/json", []byte(`{"kind":`)), 400)
	want(t, "media type", op.send("POST", "/v1/events", "text/plain", []byte(`{}`)), 415)
	want(t, "unknown kind", op.json("POST", "/v1/events", `{"kind":"nope","resource":"a","version":1}`), 422)
	want(t, "huge number", op.json("POST", "/v1/events", `{"kind":"build","resource":"a","version":1,"payload":{"n":1e400}}`), 422)
	want(t, "deep payload", op.json("POST", "/v1/events", `{"kind":"build","resource":"a","version":1,"payload":`+
		strings.Repeat(`{"a":`, 100)+"1"+strings.Repeat("}", 100)+`}`), 422)
	want(t, "NUL in resource", op.json("POST", "/v1/events", `{"kind":"build","resource":"a\u0000b","version":1}`), 422)
	want(t, "too large", op.json("POST", "/v1/events", `{"kind":"build","resource":"a","version":1,"payload":{"x":"`+
		strings.Repeat("x", 300<<10)+`"}}`), 413)
	want(t, "viewer submits (a viewer is a submitter too)", viewer.json("POST", "/v1/events", `{"kind":"build","resource":"a","version":1}`), 202)
	want(t, "no token", anon.json("POST", "/v1/events", `{"kind":"build","resource":"a","version":1}`), 401)
	want(t, "headers too large", viewer.send("GET", "/v1/events", "", nil, "X-Padding", strings.Repeat("p", 70<<10)), 431)
	want(t, "list", viewer.json("GET", "/v1/events?kind=build&limit=5", ""), 200)
	want(t, "list bad limit", viewer.json("GET", "/v1/events?limit=0", ""), 422)
	want(t, "list bad status", viewer.json("GET", "/v1/events?status=nope", ""), 422)
	want(t, "get", viewer.json("GET", "/v1/events/"+eventID, ""), 200)
	want(t, "HEAD get", viewer.send("HEAD", "/v1/events/"+eventID, "", nil), 200)
	want(t, "get unknown", viewer.json("GET", "/v1/events/0190a0b0-0000-7000-8000-000000000000", ""), 404)
	want(t, "resource", submitter.json("GET", "/v1/resources/build/app/one", ""), 200)
	want(t, "resource unknown", submitter.json("GET", "/v1/resources/build/app/none", ""), 404)

	// A run to cancel: it blocks in the target until cancelled.
	blocked := decode(t, op.json("POST", "/v1/events", `{"kind":"build","resource":"app/blocked","version":1,"payload":{"block":true}}`))
	runID := str(blocked, "run", "id")
	want(t, "cancel long reason", op.json("POST", "/v1/runs/"+runID+"/cancel", `{"reason":"`+strings.Repeat("r", 1001)+`"}`), 422)
	want(t, "cancel NUL reason", op.json("POST", "/v1/runs/"+runID+"/cancel", `{"reason":"a\u0000"}`), 422)
	want(t, "viewer cancels", viewer.json("POST", "/v1/runs/"+runID+"/cancel", `{}`), 403)
	want(t, "cancel", op.json("POST", "/v1/runs/"+runID+"/cancel", `{"reason":"apicheck"}`), 200)
	want(t, "cancel again", op.json("POST", "/v1/runs/"+runID+"/cancel", `{}`), 409)
	want(t, "cancel unknown", op.json("POST", "/v1/runs/0190a0b0-0000-7000-8000-000000000000/cancel", `{}`), 404)

	// Dead letters: five builds fail permanently.
	for i := 1; i <= 5; i++ {
		want(t, "failing build", op.json("POST", "/v1/events", fmt.Sprintf(`{"kind":"build","resource":"lib/dl-%d","version":1,"payload":{"fail":"permanent"}}`, i)), 202)
	}
	var dls []string
	testkit.Eventually(t, time.Minute, func() (bool, string) {
		page := decode(t, viewer.json("GET", "/v1/dead-letters?kind=build&limit=50", ""))
		items, _ := page["items"].([]any)
		dls = dls[:0]
		for _, it := range items {
			dls = append(dls, str(it.(map[string]any), "id"))
		}
		return len(dls) == 5, fmt.Sprintf("%d open dead letters", len(dls))
	})
	want(t, "dead letter", viewer.json("GET", "/v1/dead-letters/"+dls[0], ""), 200)
	want(t, "dead letter unknown", viewer.json("GET", "/v1/dead-letters/0190a0b0-0000-7000-8000-000000000000", ""), 404)
	want(t, "dead letters short q", viewer.json("GET", "/v1/dead-letters?q=ab", ""), 200)
	want(t, "dead letters long q", viewer.json("GET", "/v1/dead-letters?q="+strings.Repeat("q", 201), ""), 422)
	want(t, "dead letters bad reason", viewer.json("GET", "/v1/dead-letters?reason=nope", ""), 422)
	want(t, "redrive", op.json("POST", "/v1/dead-letters/"+dls[0]+"/redrive", `{"reason":"fixed"}`), 202)
	want(t, "redrive again", op.json("POST", "/v1/dead-letters/"+dls[0]+"/redrive", `{}`), 409)
	want(t, "discard", op.json("POST", "/v1/dead-letters/"+dls[1]+"/discard", `{}`), 200)
	want(t, "viewer discards", viewer.json("POST", "/v1/dead-letters/"+dls[2]+"/discard", `{}`), 403)
	want(t, "bulk both", op.json("POST", "/v1/dead-letters/redrive", `{"ids":["`+dls[2]+`"],"filter":{"kind":"build"}}`), 422)
	want(t, "bulk neither", op.json("POST", "/v1/dead-letters/redrive", `{}`), 422)
	want(t, "bulk filter null", op.json("POST", "/v1/dead-letters/redrive", `{"filter":null}`), 422)
	want(t, "bulk dry run", op.json("POST", "/v1/dead-letters/redrive", `{"ids":["`+dls[2]+`"],"dry_run":true}`), 200)
	want(t, "bulk redrive", op.json("POST", "/v1/dead-letters/redrive", `{"ids":["`+dls[2]+`"]}`), 200)
	want(t, "bulk discard", op.json("POST", "/v1/dead-letters/discard", `{"filter":{"kind":"build","resource":"lib/dl-4"}}`), 200)
	want(t, "purge", op.json("POST", "/v1/dead-letters/purge", `{"older_than":"0s","dry_run":true}`), 200)
	want(t, "purge bad", op.json("POST", "/v1/dead-letters/purge", `{"older_than":"soon"}`), 422)
	want(t, "audit", viewer.json("GET", "/v1/audit?limit=10", ""), 200)
	want(t, "audit bad cursor", viewer.json("GET", "/v1/audit?cursor=%%%", ""), 422)

	// Workflows and approvals.
	want(t, "workflow unknown", op.json("POST", "/v1/workflow-runs", `{"workflow":"nope","resource":"web","version":1}`), 422)
	wr := op.json("POST", "/v1/workflow-runs", `{"workflow":"release","resource":"web","version":1}`)
	want(t, "workflow start", wr, 202)
	wrID := str(decode(t, wr), "workflow_run", "id")
	want(t, "workflow replay", op.json("POST", "/v1/workflow-runs", `{"workflow":"release","resource":"web","version":1}`), 200)
	heldRun := func(id string) string {
		var run string
		testkit.Eventually(t, time.Minute, func() (bool, string) {
			w := decode(t, viewer.json("GET", "/v1/workflow-runs/"+id, ""))
			steps, _ := w["steps"].([]any)
			for _, s := range steps {
				if m := s.(map[string]any); m["name"] == "prod" && m["status"] == "held" {
					run = str(m, "run_id")
				}
			}
			return run != "", "workflow run " + str(w, "status")
		})
		return run
	}
	prod := heldRun(wrID)
	want(t, "events with a held run", viewer.json("GET", "/v1/events?kind=deploy", ""), 200)
	want(t, "workflow runs waiting", viewer.json("GET", "/v1/workflow-runs?status=waiting", ""), 200)
	want(t, "workflow runs bad status", viewer.json("GET", "/v1/workflow-runs?status=nope", ""), 422)
	want(t, "viewer approves", viewer.json("POST", "/v1/runs/"+prod+"/approve", `{}`), 403)
	want(t, "approve", op.json("POST", "/v1/runs/"+prod+"/approve", `{"reason":"ship it"}`), 200)
	want(t, "approve again", op.json("POST", "/v1/runs/"+prod+"/approve", `{}`), 409)
	wr2 := decode(t, op.json("POST", "/v1/workflow-runs", `{"workflow":"release","resource":"api","version":1}`))
	want(t, "reject", op.json("POST", "/v1/runs/"+heldRun(str(wr2, "workflow_run", "id"))+"/reject", `{}`), 200)
	wr3 := decode(t, op.json("POST", "/v1/workflow-runs", `{"workflow":"release","resource":"db","version":1}`))
	want(t, "workflow cancel", op.json("POST", "/v1/workflow-runs/"+str(wr3, "workflow_run", "id")+"/cancel", `{}`), 200)
	want(t, "workflow cancel unknown", op.json("POST", "/v1/workflow-runs/0190a0b0-0000-7000-8000-000000000000/cancel", `{}`), 404)

	// Quarantine: one failure of flaky quarantines its stream.
	want(t, "flaky", op.json("POST", "/v1/events", `{"kind":"flaky","resource":"svc","version":1}`), 202)
	testkit.Eventually(t, time.Minute, func() (bool, string) {
		q := decode(t, viewer.json("GET", "/v1/quarantine", ""))
		items, _ := q["items"].([]any)
		return len(items) == 1, fmt.Sprintf("%d quarantined", len(items))
	})
	want(t, "held by quarantine", op.json("POST", "/v1/events", `{"kind":"flaky","resource":"svc","version":2}`), 202)
	want(t, "viewer releases", viewer.json("POST", "/v1/quarantine/flaky/svc/release", `{}`), 403)
	want(t, "release", op.json("POST", "/v1/quarantine/flaky/svc/release", `{"reason":"fixed"}`), 200)
	want(t, "release of a stream not quarantined", op.json("POST", "/v1/quarantine/build/app/one/release", `{}`), 409)
	want(t, "release of an unknown stream", op.json("POST", "/v1/quarantine/flaky/never/release", `{}`), 409)
	want(t, "release of an unconfigured kind's stream", op.json("POST", "/v1/quarantine/nokind/q/one/release", `{}`), 409)

	// Hooks and deliveries.
	hook := func(id string, body []byte, secret string, contentType ...string) exchange {
		t.Helper()
		wh, err := standardwebhooks.NewWebhook(secret)
		if err != nil {
			t.Fatal(err)
		}
		ts := time.Now()
		sig, err := wh.Sign(id, ts, body)
		if err != nil {
			t.Fatal(err)
		}
		ct := "application/json"
		if len(contentType) > 0 {
			ct = contentType[0]
		}
		return anon.send("POST", "/hooks/hooks", ct, body,
			"webhook-id", id, "webhook-timestamp", fmt.Sprint(ts.Unix()), "webhook-signature", sig)
	}
	want(t, "hook", hook("msg-1", []byte(`{"action":"built","app":"web"}`), hookSecret), 202)
	want(t, "hook replay", hook("msg-1", []byte(`{"action":"built","app":"web"}`), hookSecret), 200)
	want(t, "hook ignored", hook("msg-2", []byte(`{"action":"other"}`), hookSecret), 202)
	want(t, "hook mapping failed", hook("msg-3", []byte(`{"action":"built","app":""}`), hookSecret), 422)
	want(t, "hook bad signature", hook("msg-4", []byte(`{"action":"built","app":"web"}`),
		"whsec_"+base64.StdEncoding.EncodeToString([]byte("another secret entirely"))), 401)
	want(t, "hook unknown source", anon.send("POST", "/hooks/nope", "application/json", []byte(`{}`)), 404)
	want(t, "hook unsigned", anon.send("POST", "/hooks/hooks", "application/json", []byte(`{}`)), 401)
	want(t, "hook media type", hook("msg-5", []byte(`{"action":"built","app":"web"}`), hookSecret, "text/plain"), 415)
	dp := decode(t, viewer.json("GET", "/v1/deliveries?source=hooks", ""))
	items, _ := dp["items"].([]any)
	if len(items) == 0 {
		t.Fatal("no deliveries listed")
	}
	want(t, "delivery", viewer.json("GET", "/v1/deliveries/"+str(items[0].(map[string]any), "id"), ""), 200)
	want(t, "delivery unknown", viewer.json("GET", "/v1/deliveries/0190a0b0-0000-7000-8000-000000000000", ""), 404)
	want(t, "deliveries bad status", viewer.json("GET", "/v1/deliveries?status=nope", ""), 422)

	// Every operation was sent at least once.
	var missing []string
	v.mu.Lock()
	for _, o := range v.operations() {
		if len(v.seen[o]) == 0 {
			missing = append(missing, o)
		}
	}
	seen := make([]string, 0, len(v.seen))
	for o, statuses := range v.seen {
		var ss []string
		for s := range statuses {
			ss = append(ss, fmt.Sprint(s))
		}
		sort.Strings(ss)
		seen = append(seen, o+" "+strings.Join(ss, ","))
	}
	v.mu.Unlock()
	sort.Strings(seen)
	t.Logf("validated answers:\n%s", strings.Join(seen, "\n"))
	if len(missing) > 0 {
		t.Errorf("operations never exercised: %v", missing)
	}
}
