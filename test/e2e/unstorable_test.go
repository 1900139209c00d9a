package e2e

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/converge-run/converge/test/cvproc"
	"github.com/converge-run/converge/test/pgtest"
	"github.com/converge-run/converge/test/testkit"
)

// TestUnstorableTargetAnswers: a target's answer that PostgreSQL could not
// store as sent — a 200 whose JSON holds \u0000, a lone surrogate
// escape or a byte that is not UTF-8, one whose numbers would print as thousands of digits, an error
// body with a NUL byte — still gets its attempt recorded at once, with
// the call made once: the output is not kept (as a body that is not JSON
// is not), the error's NUL becomes U+FFFD. Before, the outcome's write
// failed until rescue_after, and the rescuer called the target again.
func TestUnstorableTargetAnswers(t *testing.T) {
	t.Parallel()
	pgtest.URL(t)
	cvproc.Build(t)
	var mu sync.Mutex
	calls := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		resource := strings.TrimPrefix(r.URL.Path, "/")
		mu.Lock()
		calls[resource]++
		n := calls[resource]
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch resource {
		case "nul":
			_, _ = io.WriteString(w, `{"a":"x\u0000y"}`)
		case "surrogate":
			_, _ = io.WriteString(w, `{"a":"\ud800"}`)
		case "latin1":
			_, _ = io.WriteString(w, "{\"a\":\"caf\xe9\"}")
		case "digits":
			_, _ = io.WriteString(w, "["+strings.Repeat("1e-9000,", 99)+"1e-9000]")
		case "error":
			if n == 1 {
				w.Header().Set("Content-Type", "text/plain")
				w.WriteHeader(http.StatusServiceUnavailable)
				_, _ = io.WriteString(w, "ERR\x00nul")
				return
			}
			_, _ = io.WriteString(w, `{"ok":true}`)
		}
	}))
	t.Cleanup(srv.Close)
	db := pgtest.NewDatabase(t)
	var kinds strings.Builder
	for _, k := range []string{"nul", "surrogate", "latin1", "digits", "error"} {
		fmt.Fprintf(&kinds, "  %s:\n    target:\n      http: {url: %s/%s, timeout: 5s}\n    max_attempts: 3\n    debounce: 0s\n    backoff: {initial: 100ms, max: 200ms}\n", k, srv.URL, k)
	}
	conf := fmt.Sprintf("listen: 127.0.0.1:0\ndatabase_url: %s\nshutdown_timeout: 5s\nrescue_after: 30s\nriver: {fetch_poll_interval: 20ms}\nkinds:\n%s", db, kinds.String())
	p := start(t, cvproc.Env("CONVERGE_ADMIN_TOKEN="+adminToken), "serve", "--config", testkit.ConfigFile(t, conf))
	c := client{base: p.URL(t, 30*time.Second), token: adminToken}

	for _, k := range []string{"nul", "surrogate", "latin1", "digits", "error"} {
		ev := c.waitEvent(t, c.submit(t, k, "app/"+k, 1, map[string]any{"ref": "main"}), 15*time.Second)
		runs, _ := ev["runs"].([]any)
		if ev["status"] != "succeeded" || len(runs) != 1 {
			t.Errorf("%s: event %v, want succeeded with one run", k, ev)
			continue
		}
		run := runs[0].(map[string]any)
		history, _ := run["attempt_history"].([]any)
		mu.Lock()
		n := calls[k]
		mu.Unlock()
		switch k {
		case "error":
			if n != 2 || len(history) != 2 {
				t.Errorf("%s: %d calls, %d attempts, want 2 and 2 (a 503, then a 200)", k, n, len(history))
				continue
			}
			first := history[0].(map[string]any)
			e, _ := first["error"].(map[string]any)
			if first["outcome"] != "transient_error" || e["http_status"] != float64(503) {
				t.Errorf("%s: first attempt %v, want transient_error with http_status 503", k, first)
			}
			if msg, _ := e["message"].(string); strings.ContainsRune(msg, 0) || !strings.Contains(msg, "ERR\uFFFDnul") {
				t.Errorf("%s: error message %q, want the body with its NUL as U+FFFD", k, msg)
			}
		default:
			if n != 1 || len(history) != 1 || run["output"] != nil {
				t.Errorf("%s: %d calls, %d attempts, output %v; want one call, one attempt, no output kept", k, n, len(history), run["output"])
			}
		}
	}
}
