package api_test

import (
	"net/http"
	"strings"
	"testing"
)

// TestNoSecretsInLogsOrAnswers uses a real server with every kind of token
// (valid, unknown, revoked, admin, in headers of every shape), lets its
// database fail under it, and checks that no token appears in its log
// output (at debug level) or in any answer, and that /healthz, /readyz and
// /metrics stay open and say nothing sensitive.
func TestNoSecretsInLogsOrAnswers(t *testing.T) {
	t.Parallel()
	s := newSecServer(t, secOptions{isolated: true})
	secrets := []string{s.admin, s.tokens["submitter"], s.tokens["viewer"], s.tokens["operator"], s.tokens["revoked"]}
	const unknown = "cvg_unknown-Secret-token-0123456789abcdefghijk"
	secrets = append(secrets, unknown)

	answers := map[string]string{}
	record := func(what string, w interface {
		Result() *http.Response
	}, body string) {
		var h strings.Builder
		_ = w.Result().Header.Write(&h)
		answers[what] = h.String() + "\n" + body
	}
	requests := []struct{ method, path, body string }{
		{http.MethodPost, "/v1/events", `{"kind":"build","resource":"app/web","version":1}`},
		{http.MethodPost, "/v1/events", `{"kind":"build","resource":"app/web","version":1,"payload":{"x":1}}`},
		{http.MethodPost, "/v1/events", `{"kind":"nope"}`},
		{http.MethodGet, "/v1/events", ""},
		{http.MethodGet, "/v1/events?kind=%ff", ""},
		{http.MethodGet, "/v1/audit", ""},
		{http.MethodGet, "/v1/dead-letters", ""},
		{http.MethodPost, "/v1/dead-letters/redrive", `{"ids":["x"]}`},
		{http.MethodPost, "/v1/runs/00000000-0000-0000-0000-000000000000/cancel", ""},
	}
	auths := []string{"", "Bearer " + unknown, "bearer " + unknown, "Basic " + unknown, unknown, "Bearer  " + unknown + " ",
		"Bearer " + s.tokens["revoked"]}
	for _, tok := range secrets[:4] {
		auths = append(auths, "Bearer "+tok)
	}
	send := func(phase string) {
		for _, req := range requests {
			for i, auth := range auths {
				var body *strings.Reader
				if req.body != "" {
					body = strings.NewReader(req.body)
				}
				w := s.do(t, req.method, req.path, auth, nilIfEmpty(body))
				record(phase+" "+req.method+" "+req.path+" auth#"+string(rune('0'+i)), w, w.Body.String())
			}
		}
		for _, path := range []string{"/healthz", "/readyz", "/metrics", "/openapi.json"} {
			w := s.do(t, http.MethodGet, path, "", nil)
			if phase == "up" && w.Code != http.StatusOK {
				t.Errorf("%s without a token = %d %s", path, w.Code, w.Body)
			}
			record(phase+" "+path, w, w.Body.String())
		}
	}
	send("up")

	// The database goes away: the failures are logged with detail and
	// answered 503 unavailable (SPEC §15) without it; readyz says 503 and
	// nothing more.
	s.pool.Close()
	send("down")
	w := s.do(t, http.MethodGet, "/readyz", "", nil)
	if w.Code != http.StatusServiceUnavailable || strings.Contains(w.Body.String(), "postgres") {
		t.Errorf("readyz with the database down = %d %s, want 503 without detail", w.Code, w.Body)
	}
	w = s.do(t, http.MethodGet, "/v1/events", "Bearer "+s.tokens["viewer"], nil)
	if w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), `"type":"urn:converge:problem:unavailable"`) ||
		!strings.Contains(w.Body.String(), `"detail":"database unreachable; try again later"`) || w.Header().Get("Retry-After") == "" {
		t.Errorf("with the database down = %d %s (Retry-After %q), want 503 unavailable", w.Code, w.Body, w.Header().Get("Retry-After"))
	}
	logs := s.logs.String()
	if !strings.Contains(logs, "database unavailable") || !strings.Contains(logs, "closed pool") {
		t.Errorf("the database failures were not logged with their detail:\n%s", logs)
	}

	answers["logs"] = logs
	for what, text := range answers {
		for _, secret := range secrets {
			if strings.Contains(text, secret) {
				t.Errorf("%s contains a token:\n%.1000s", what, text)
			}
		}
		if strings.Contains(text, "postgres://") || strings.Contains(text, "password") {
			t.Errorf("%s mentions the database URL or a password:\n%.1000s", what, text)
		}
	}
}

// nilIfEmpty keeps a nil *strings.Reader from becoming a non-nil io.Reader.
func nilIfEmpty(r *strings.Reader) interface{ Read([]byte) (int, error) } {
	if r == nil {
		return nil
	}
	return r
}
