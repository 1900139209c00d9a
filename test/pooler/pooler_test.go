package pooler

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/converge-run/converge/test/cvproc"
	"github.com/converge-run/converge/test/pgbouncer"
	"github.com/converge-run/converge/test/pgtest"
	"github.com/converge-run/converge/test/testkit"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const adminToken = "pooler-admin-token-0123456789"

// startBouncer starts a PgBouncer in front of the test server of
// databaseURL, stopped at the test's cleanup.
func startBouncer(t *testing.T, databaseURL string) *pgbouncer.Bouncer {
	t.Helper()
	b, err := pgbouncer.Start(t.Context(), databaseURL)
	if err != nil {
		if errors.Is(err, pgbouncer.ErrNoBinary) && os.Getenv("TEST_REQUIRE_PGBOUNCER") != "1" {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("pgbouncer log:\n%s", cvproc.LastLines(b.Log(), 30))
		}
		b.Stop()
	})
	return b
}

// target answers 200 with a JSON output, except that a resource whose
// payload says "fail" fails permanently (422) until released.
type target struct {
	srv      *httptest.Server
	mu       sync.Mutex
	released bool
	calls    int
}

func newTarget(t *testing.T) *target {
	tg := &target{}
	tg.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Resource string         `json:"resource"`
			Payload  map[string]any `json:"payload"`
		}
		_ = json.NewDecoder(r.Body).Decode(&body)
		tg.mu.Lock()
		tg.calls++
		fail := body.Payload["fail"] == true && !tg.released
		tg.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if fail {
			w.WriteHeader(http.StatusUnprocessableEntity)
			_, _ = io.WriteString(w, `{"error":"refused"}`)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"built": body.Resource, "payload": body.Payload})
	}))
	t.Cleanup(tg.srv.Close)
	return tg
}

func (tg *target) release() {
	tg.mu.Lock()
	tg.released = true
	tg.mu.Unlock()
}

// config is a configuration through pooledURL with pooler transaction,
// directURL as direct_url when not empty, and extra top-level YAML.
func config(pooledURL, directURL string, tg *target, extra string) string {
	direct := ""
	if directURL != "" {
		direct = "  direct_url: " + directURL + "\n"
	}
	return fmt.Sprintf(`listen: 127.0.0.1:0
database_url: %s
database:
  pooler: transaction
%sshutdown_timeout: 5s
river: {fetch_poll_interval: 20ms}
kinds:
  build:
    target:
      http: {url: %s/build, timeout: 10s}
    max_attempts: 1
    debounce: 1ms
%s`, pooledURL, direct, tg.srv.URL, extra)
}

// call sends method path (with body as JSON when not nil) to base with
// the admin token; the answer's numbers are json.Number.
func call(t *testing.T, base, method, path string, body any) testkit.Answer {
	t.Helper()
	return testkit.Client{Base: base, Token: adminToken, Timeout: time.Minute, UseNumber: true}.Do(t, method, path, body)
}

func proc(t *testing.T, args ...string) (*cvproc.Process, string) {
	t.Helper()
	p := cvproc.Start(t, cvproc.Options{Args: args, Env: cvproc.Env("CONVERGE_ADMIN_TOKEN=" + adminToken)})
	return p, p.URL(t, 60*time.Second)
}

func run(t *testing.T, args ...string) (int, string) {
	t.Helper()
	p := cvproc.Start(t, cvproc.Options{Args: args, Env: cvproc.Env()})
	code := p.Wait(t, 2*time.Minute)
	return code, p.Stdout() + p.Stderr()
}

// waitStatus waits until event id has status and returns the event.
func waitStatus(t *testing.T, base, id, status string) map[string]any {
	t.Helper()
	var ev map[string]any
	testkit.Eventually(t, 30*time.Second, func() (bool, string) {
		a := call(t, base, http.MethodGet, "/v1/events/"+id, nil)
		ev = a.Body
		return a.Body["status"] == status, fmt.Sprintf("event %s: %d %v, want %s", id, a.Status, a.Body["status"], status)
	})
	return ev
}

// payload has what jsonb must keep: nesting, big and fractional numbers,
// unicode, escapes.
func payload(n int, fail bool) map[string]any {
	return map[string]any{"ref": "main", "n": n, "big": json.Number("123456789012345678901234567890"), "pi": 3.25,
		"text": "héllo \"wörld\" \\ \u2603", "nested": map[string]any{"list": []any{1, "two", nil, true, map[string]any{}}}, "fail": fail}
}

// TestTransactionPooler runs converge through PgBouncer in transaction
// mode: one api and one worker with direct_url (River listens over it), a
// serve without (River polls).
func TestTransactionPooler(t *testing.T) {
	direct := pgtest.EmptyDatabase(t)
	b := startBouncer(t, direct)
	pooled := b.URL(direct)
	tg := newTarget(t)
	withDirect := testkit.ConfigFile(t, config(pooled, direct, tg, ""))
	noDirect := testkit.ConfigFile(t, config(pooled, "", tg, ""))

	// Migrations need a session: without direct_url they are refused,
	// naming the key; with it they run past the pooler.
	if code, out := run(t, "migrate", "up", "--config", noDirect); code != 1 || !strings.Contains(out, "database.direct_url") {
		t.Errorf("migrate up with pooler transaction and no direct_url: exit %d, %s; want 1 naming database.direct_url", code, out)
	}
	if code, out := run(t, "migrate", "up", "--config", withDirect); code != 0 {
		t.Fatalf("migrate up over direct_url: exit %d\n%s", code, out)
	}
	if code, out := run(t, "migrate", "status", "--config", withDirect); code != 0 || strings.Contains(out, "pending") {
		t.Errorf("migrate status through the pooler: exit %d, %s", code, out)
	}
	if code, out := run(t, "token", "create", "--name", "ci", "--role", "submitter", "--config", noDirect); code != 0 {
		t.Errorf("token create through the pooler: exit %d, %s", code, out)
	}

	api, apiURL := proc(t, "api", "--config", withDirect)
	worker, _ := proc(t, "worker", "--config", withDirect)
	serve, serveURL := proc(t, "serve", "--config", noDirect)
	if a := call(t, apiURL, http.MethodGet, "/readyz", nil); a.Status != http.StatusOK {
		t.Errorf("readyz of api through the pooler: %d %s", a.Status, a.Raw)
	}

	// Events with payloads: accepted, replayed (the payloads compared as
	// jsonb), run to success with their output kept.
	var ids []string
	for i, base := range []string{apiURL, serveURL, apiURL, serveURL} {
		ev := map[string]any{"kind": "build", "resource": fmt.Sprintf("app/%d", i), "version": 1, "payload": payload(i, false)}
		a := call(t, base, http.MethodPost, "/v1/events", ev)
		if a.Status != http.StatusAccepted {
			t.Fatalf("POST /v1/events through the pooler: %d %s", a.Status, a.Raw)
		}
		ids = append(ids, a.Body["event"].(map[string]any)["id"].(string))
		if r := call(t, base, http.MethodPost, "/v1/events", ev); r.Status != http.StatusOK {
			t.Errorf("replay through the pooler: %d %s, want 200", r.Status, r.Raw)
		}
		ev["payload"] = payload(i+100, false)
		if r := call(t, base, http.MethodPost, "/v1/events", ev); r.Status != http.StatusConflict {
			t.Errorf("conflicting replay through the pooler: %d %s, want 409", r.Status, r.Raw)
		}
	}
	for i, id := range ids {
		ev := waitStatus(t, apiURL, id, "succeeded")
		run := ev["runs"].([]any)[0].(map[string]any)
		out, _ := run["output"].(map[string]any)
		if out["built"] != fmt.Sprintf("app/%d", i) {
			t.Errorf("event %d output %v", i, run["output"])
		}
		if p, _ := ev["payload"].(map[string]any); fmt.Sprint(p["big"]) != "123456789012345678901234567890" || p["text"] != "héllo \"wörld\" \\ \u2603" {
			t.Errorf("event %d payload came back as %v", i, ev["payload"])
		}
	}

	// A permanent failure makes a dead letter; once the target is fixed,
	// a redrive runs it to success.
	a := call(t, apiURL, http.MethodPost, "/v1/events", map[string]any{"kind": "build", "resource": "app/dlq", "version": 1, "payload": payload(9, true)})
	if a.Status != http.StatusAccepted {
		t.Fatalf("POST failing event: %d %s", a.Status, a.Raw)
	}
	failing := a.Body["event"].(map[string]any)["id"].(string)
	waitStatus(t, apiURL, failing, "failed")
	list := call(t, apiURL, http.MethodGet, "/v1/dead-letters?resource=app/dlq", nil)
	items, _ := list.Body["items"].([]any)
	if list.Status != http.StatusOK || len(items) != 1 {
		t.Fatalf("dead letters through the pooler: %d %s", list.Status, list.Raw)
	}
	dl := items[0].(map[string]any)
	if e, _ := dl["error"].(map[string]any); e["class"] != "permanent" || fmt.Sprint(e["http_status"]) != "422" {
		t.Errorf("dead letter error %v", dl["error"])
	}
	tg.release()
	rd := call(t, apiURL, http.MethodPost, "/v1/dead-letters/"+dl["id"].(string)+"/redrive", map[string]any{"reason": "fixed"})
	if rd.Status != http.StatusAccepted {
		t.Fatalf("redrive through the pooler: %d %s", rd.Status, rd.Raw)
	}
	waitStatus(t, apiURL, failing, "succeeded")

	// A stream superseded under the pooler: the newest version wins.
	for v := 1; v <= 5; v++ {
		if r := call(t, serveURL, http.MethodPost, "/v1/events", map[string]any{"kind": "build", "resource": "app/burst", "version": v, "payload": payload(v, false)}); r.Status != http.StatusAccepted {
			t.Fatalf("burst v%d: %d %s", v, r.Status, r.Raw)
		}
	}
	testkit.Eventually(t, 30*time.Second, func() (bool, string) {
		r := call(t, apiURL, http.MethodGet, "/v1/resources/build/app/burst", nil)
		return fmt.Sprint(r.Body["applied_version"]) == "5", "resource app/burst: " + r.Raw
	})

	// Everything went through PgBouncer, and nothing failed to encode.
	testkit.Eventually(t, 10*time.Second, func() (bool, string) {
		n, err := b.Transactions(t.Context())
		return n >= 50, fmt.Sprintf("PgBouncer counted %d transactions (%v), want many", n, err)
	})
	for _, p := range []*cvproc.Process{api, worker, serve} {
		for _, bad := range []string{"unable to encode", "is not storable JSON", "prepared statement", "internal error", "SQLSTATE 08P01"} {
			if strings.Contains(p.Stderr(), bad) {
				t.Errorf("converge %s logged %q:\n%s", p.Name(), bad, cvproc.LastLines(p.Stderr(), 20))
			}
		}
		if !p.Running() {
			t.Errorf("converge %s exited: %v", p.Name(), p.Err())
		}
	}
}

// TestTransactionPoolerLockTimeout holds a lock on converge_streams: behind
// the pooler the timeouts are set per transaction (set_config(..., true)),
// and POST /v1/events is answered 503 within database.lock_timeout.
func TestTransactionPoolerLockTimeout(t *testing.T) {
	direct := pgtest.NewDatabase(t)
	b := startBouncer(t, direct)
	tg := newTarget(t)
	cfg := testkit.ConfigFile(t, config(b.URL(direct), direct, tg, "request_timeout: 20s\n"))
	_, base := proc(t, "api", "--config", writeLockTimeout(t, cfg))

	ctx := context.Background()
	conn, err := pgx.Connect(ctx, direct)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(ctx) }()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `LOCK TABLE converge_streams IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	a := call(t, base, http.MethodPost, "/v1/events", map[string]any{"kind": "build", "resource": "app/locked", "version": 1, "payload": payload(1, false)})
	if a.Status != http.StatusServiceUnavailable || a.Body["type"] != "urn:converge:problem:unavailable" || a.Took > 3*time.Second {
		t.Errorf("POST /v1/events under a lock behind the pooler: %d %s after %s, want 503 within lock_timeout", a.Status, a.Raw, a.Took)
	}
	_ = tx.Rollback(ctx)
	if r := call(t, base, http.MethodPost, "/v1/events", map[string]any{"kind": "build", "resource": "app/locked", "version": 1, "payload": payload(1, false)}); r.Status != http.StatusAccepted {
		t.Errorf("POST /v1/events after the lock: %d %s", r.Status, r.Raw)
	}
}

// writeLockTimeout adds database.lock_timeout: 300ms to the config file at
// path and returns path.
func writeLockTimeout(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data = bytes.Replace(data, []byte("  pooler: transaction\n"), []byte("  pooler: transaction\n  lock_timeout: 300ms\n"), 1)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
