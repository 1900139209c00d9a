package testkit_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/converge-run/converge/test/testkit"
)

// TestClient: Do sends the body as JSON with its content type, the token
// only under TokenPrefix, and reads status, headers, the raw answer and
// the JSON object (numbers as float64, or json.Number with UseNumber).
func TestClient(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Seen-Auth", r.Header.Get("Authorization"))
		w.Header().Set("X-Seen-Type", r.Header.Get("Content-Type"))
		w.WriteHeader(http.StatusTeapot)
		_ = json.NewEncoder(w).Encode(map[string]any{"n": 9007199254740993, "got": string(b)})
	}))
	t.Cleanup(srv.Close)

	c := testkit.Client{Base: srv.URL, Token: "tok", TokenPrefix: "/v1/"}
	a := c.Do(t, http.MethodPost, "/v1/x", map[string]int{"v": 1})
	if a.Status != http.StatusTeapot || a.Header.Get("X-Seen-Auth") != "Bearer tok" || a.Header.Get("X-Seen-Type") != "application/json" ||
		a.Body["got"] != `{"v":1}` || a.Raw == "" || a.Took <= 0 {
		t.Errorf("POST /v1/x: %+v", a)
	}
	if _, ok := a.Body["n"].(float64); !ok {
		t.Errorf("n decoded as %T, want float64", a.Body["n"])
	}
	if a := c.Do(t, http.MethodGet, "/readyz", nil); a.Header.Get("X-Seen-Auth") != "" || a.Header.Get("X-Seen-Type") != "" || a.Body["got"] != "" {
		t.Errorf("GET /readyz (outside the token prefix, no body): %+v", a)
	}
	c.UseNumber, c.TokenPrefix = true, ""
	a = c.Do(t, http.MethodGet, "/readyz", nil)
	if n, ok := a.Body["n"].(json.Number); !ok || n.String() != "9007199254740993" || a.Header.Get("X-Seen-Auth") != "Bearer tok" {
		t.Errorf("with UseNumber and no prefix: n %#v, auth %q", a.Body["n"], a.Header.Get("X-Seen-Auth"))
	}
}
