package faults

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestRetryAfterCutAndKindNotServed, through the binary: a Retry-After of
// an hour is cut to backoff.max_retry_after (1s here) and the attempt's
// error says so (SPEC §6); a dead letter of a kind that is no longer
// configured (the api restarted without it) is refused 409
// kind-not-served, alone and in bulk (SPEC §15).
func TestRetryAfterCutAndKindNotServed(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and converge processes; skipped with -short")
	}
	pg := startPG(t)
	var mu sync.Mutex
	calls := map[string]int{}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls[r.URL.Path]++
		n := calls[r.URL.Path]
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case strings.HasPrefix(r.URL.Path, "/retired/"):
			w.WriteHeader(http.StatusBadRequest)
		case n == 1:
			w.Header().Set("Retry-After", "3600")
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_, _ = w.Write([]byte(`{}`))
	})
	kinds := `  build:
    target:
      http: {url: "%[1]s/build/%[2]s", timeout: 20s}
    backoff: {initial: 20ms, max: 200ms, max_retry_after: 1s}
    debounce: 0s
`
	retired := `  retired:
    target:
      http: {url: "%[1]s/retired/%[2]s", timeout: 20s}
    max_attempts: 1
    debounce: 0s
`
	st := newStack(t, pg, nil, stackConfig{RescueAfter: 5 * time.Second, Kinds: kinds + retired, Handler: handler})
	st.mustStart("api", "api")
	st.mustStart("worker", "w1")
	ctx := t.Context()

	// Retry-After: 3600 → a second attempt about 1s later.
	if _, err := st.submitUntilAccepted(ctx, "build", "cut/1", 1, map[string]any{}); err != nil {
		t.Fatal(err)
	}
	var status, msg string
	var gap float64
	deadline := time.Now().Add(30 * time.Second)
	for status != "succeeded" {
		if time.Now().After(deadline) {
			t.Fatalf("run is %q 30s on, want succeeded (a Retry-After of an hour honoured whole?)", status)
		}
		time.Sleep(50 * time.Millisecond)
		_ = pg.pool.QueryRow(ctx, `SELECT r.status, coalesce(a1.error->>'message', ''),
				coalesce(extract(epoch FROM a2.started_at - a1.finished_at)::float8, 0)
			FROM converge_runs r JOIN converge_attempts a1 ON a1.run_id = r.id AND a1.number = 1
			LEFT JOIN converge_attempts a2 ON a2.run_id = r.id AND a2.number = 2
			WHERE r.resource = 'cut/1'`).Scan(&status, &msg, &gap)
	}
	if !strings.Contains(msg, "Retry-After of 1h0m0s cut to backoff.max_retry_after, 1s") {
		t.Errorf("attempt 1's error %q does not say the Retry-After was cut", msg)
	}
	if gap < 1 || gap > 10 {
		t.Errorf("attempt 2 began %.2fs after attempt 1 ended, want the cut Retry-After of 1s", gap)
	}

	// A dead letter of kind retired, then the api restarted without it.
	if _, err := st.submitUntilAccepted(ctx, "retired", "old/1", 1, map[string]any{}); err != nil {
		t.Fatal(err)
	}
	var dl string
	for deadline = time.Now().Add(30 * time.Second); dl == ""; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no dead letter")
		}
		_ = pg.pool.QueryRow(ctx, `SELECT id::text FROM converge_dead_letters WHERE resource = 'old/1'`).Scan(&dl)
	}
	if err := st.kill("api"); err != nil {
		t.Fatal(err)
	}
	st.cfg.Kinds = kinds
	st.mustStart("api", "api")
	a, err := st.do(ctx, http.MethodPost, "/v1/dead-letters/"+dl+"/redrive", map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	var p struct {
		Type string `json:"type"`
	}
	if a.status != http.StatusConflict || json.Unmarshal(a.body, &p) != nil || p.Type != "urn:converge:problem:kind-not-served" {
		t.Errorf("redrive: %d %s, want 409 kind-not-served", a.status, a.body)
	}
	a, err = st.do(ctx, http.MethodPost, "/v1/dead-letters/redrive", map[string]any{"ids": []string{dl}})
	if err != nil {
		t.Fatal(err)
	}
	if a.status != http.StatusOK || !strings.Contains(string(a.body), `"reason":"kind-not-served"`) {
		t.Errorf("bulk redrive: %d %s, want it skipped as kind-not-served", a.status, a.body)
	}
	var open string
	if err := pg.pool.QueryRow(context.Background(), `SELECT status FROM converge_dead_letters WHERE id = $1`, dl).Scan(&open); err != nil || open != "open" {
		t.Errorf("dead letter %q (%v), want still open", open, err)
	}
}
