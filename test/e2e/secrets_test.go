package e2e

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/converge-run/converge/test/cvproc"
	"github.com/converge-run/converge/test/pgtest"
	"github.com/converge-run/converge/test/testkit"
)

// TestNoSecretInLogs runs `converge serve` at debug level with a known
// admin token and a target whose headers carry a secret, submits events
// that succeed, retry and fail, and requests with wrong and missing
// tokens, then greps the process's whole standard error and output for
// the token and the secret (issue 19: no secret or token ever logged).
func TestNoSecretInLogs(t *testing.T) {
	t.Parallel()
	const (
		token  = "e2e-logs-admin-Token-7f3c9a1b2d4e6f80"
		secret = "e2e-logs-header-Secret-5e8d2c7a9b1f3046"
	)
	db := pgtest.NewDatabase(t)
	var withSecret, calls atomic.Int64
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if r.Header.Get("X-Deploy-Key") == secret {
			withSecret.Add(1)
		}
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		switch {
		case strings.Contains(string(b), `"fail":"permanent"`):
			w.WriteHeader(http.StatusUnprocessableEntity)
			_, _ = io.WriteString(w, `{"error":"bad definition"}`)
		case strings.Contains(string(b), `"fail":"transient"`):
			w.WriteHeader(http.StatusServiceUnavailable)
		default:
			_, _ = io.WriteString(w, `{"ok":true}`)
		}
	}))
	t.Cleanup(target.Close)
	cfg := testkit.ConfigFile(t, fmt.Sprintf(`listen: 127.0.0.1:0
%slog_level: debug
river: {fetch_poll_interval: 20ms}
kinds:
  build:
    target:
      http:
        url: %s/build
        timeout: 10s
        headers: {X-Deploy-Key: %s}
    max_attempts: 2
    backoff: {initial: 20ms, max: 50ms}
`, databaseYAML(db), target.URL, secret))
	p := start(t, cvproc.Env("CONVERGE_ADMIN_TOKEN="+token), "serve", "--config", cfg)
	c := client{base: p.URL(t, 60*time.Second), token: token}
	cvproc.WaitHTTP(t, c.base+"/healthz", 10*time.Second)

	ids := []string{
		c.submit(t, "build", "app/ok", 1, map[string]any{}),
		c.submit(t, "build", "app/transient", 1, map[string]any{"fail": "transient"}),
		c.submit(t, "build", "app/permanent", 1, map[string]any{"fail": "permanent"}),
	}
	for _, id := range ids {
		c.waitEvent(t, id, 30*time.Second)
	}
	// Wrong tokens: one that extends the real one, one without it.
	for _, bad := range []string{token + "x", "nope"} {
		if status, _ := (client{base: c.base, token: bad}).do(t, http.MethodGet, "/v1/events", nil); status != http.StatusUnauthorized {
			t.Errorf("a wrong token got %d", status)
		}
	}
	if status, _ := c.do(t, http.MethodGet, "/v1/dead-letters", nil); status != http.StatusOK {
		t.Errorf("list dead letters: %d", status)
	}
	if withSecret.Load() == 0 || withSecret.Load() != calls.Load() {
		t.Fatalf("the target got the secret header on %d of %d calls", withSecret.Load(), calls.Load())
	}
	p.Stop()
	out := p.Stderr() + p.Stdout()
	if !strings.Contains(out, "attempt failed") {
		t.Errorf("the logs have no failed attempt; the test checked too little:\n%s", cvproc.LastLines(out, 20))
	}
	for name, s := range map[string]string{"admin token": token, "target header secret": secret} {
		if strings.Contains(out, s) {
			t.Errorf("the %s appears in the logs", name)
		}
	}
	t.Logf("%d bytes of logs checked, %d target calls", len(out), calls.Load())
}
