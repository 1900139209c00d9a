package api_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/api"
	"github.com/converge-run/converge/test/testkit"
)

// TestRateLimit checks the per-token limit: past RateLimit requests in the
// window a token gets 429 rate-limited with Retry-After, other tokens are
// not affected, and requests without a valid token are answered 401 before
// the limiter counts them.
func TestRateLimit(t *testing.T) {
	t.Parallel()
	s := newSecServer(t, secOptions{rateLimit: 3, rateWindow: time.Minute})
	for i := range 3 {
		w := s.do(t, http.MethodGet, "/v1/events", "Bearer "+s.tokens["submitter"], nil)
		if w.Code != http.StatusOK {
			t.Fatalf("request %d = %d %s, want 200", i+1, w.Code, w.Body)
		}
		h := w.Header()
		if h.Get("RateLimit-Limit") != "3" || h.Get("RateLimit-Remaining") != strconv.Itoa(2-i) || !secSecondsIn(h.Get("RateLimit-Reset"), 1, 60) {
			t.Errorf("request %d: RateLimit-Limit %q, -Remaining %q, -Reset %q; want 3, %d, 1-60",
				i+1, h.Get("RateLimit-Limit"), h.Get("RateLimit-Remaining"), h.Get("RateLimit-Reset"), 2-i)
		}
	}
	w := s.do(t, http.MethodGet, "/v1/events", "Bearer "+s.tokens["submitter"], nil)
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("request 4 = %d %s, want 429", w.Code, w.Body)
	}
	secCheckProblem(t, w, "rate-limited")
	// Retry-After is the real wait: what is left of the minute, not the
	// window.
	h := w.Header()
	if got := h.Get("Retry-After"); !secSecondsIn(got, 1, 60) || got != h.Get("RateLimit-Reset") {
		t.Errorf("Retry-After = %q, RateLimit-Reset %q: want the same, 1-60", got, h.Get("RateLimit-Reset"))
	}
	if h.Get("RateLimit-Limit") != "3" || h.Get("RateLimit-Remaining") != "0" {
		t.Errorf("429: RateLimit-Limit %q, -Remaining %q; want 3, 0", h.Get("RateLimit-Limit"), h.Get("RateLimit-Remaining"))
	}
	for k := range h {
		if strings.HasPrefix(k, "X-Ratelimit") {
			t.Errorf("non-standard header %s sent", k)
		}
	}
	// Any route counts against the same token.
	if w := s.do(t, http.MethodPost, "/v1/events", "Bearer "+s.tokens["submitter"], strings.NewReader(`{}`)); w.Code != http.StatusTooManyRequests {
		t.Errorf("POST after the limit = %d, want 429", w.Code)
	}
	// Other tokens have their own budget.
	for _, who := range []string{"viewer", "operator"} {
		if w := s.do(t, http.MethodGet, "/v1/events", "Bearer "+s.tokens[who], nil); w.Code != http.StatusOK {
			t.Errorf("%s = %d %s, want 200", who, w.Code, w.Body)
		}
	}
	if w := s.do(t, http.MethodGet, "/v1/events", "Bearer "+s.admin, nil); w.Code != http.StatusOK {
		t.Errorf("admin = %d %s, want 200", w.Code, w.Body)
	}
	// Without a valid token: 401, never 429 (the limiter keys by actor).
	for range 5 {
		if w := s.do(t, http.MethodGet, "/v1/events", "Bearer nope", nil); w.Code != http.StatusUnauthorized {
			t.Fatalf("bad token = %d, want 401", w.Code)
		}
	}
	// Operational endpoints are not limited.
	for range 5 {
		if w := s.do(t, http.MethodGet, "/healthz", "", nil); w.Code != http.StatusOK {
			t.Fatalf("healthz = %d, want 200", w.Code)
		}
	}
}

// TestRateLimitShortWindow checks that Retry-After is at least one second
// for a window under a second, and that the budget comes back after it.
func TestRateLimitShortWindow(t *testing.T) {
	t.Parallel()
	s := newSecServer(t, secOptions{rateLimit: 2, rateWindow: 200 * time.Millisecond})
	token := "Bearer " + s.tokens["viewer"]
	deadline := time.Now().Add(5 * time.Second)
	var limited *httptest.ResponseRecorder
	for limited == nil && time.Now().Before(deadline) {
		if w := s.do(t, http.MethodGet, "/v1/audit", token, nil); w.Code == http.StatusTooManyRequests {
			limited = w
		}
	}
	if limited == nil {
		t.Fatal("never rate-limited")
	}
	if got := limited.Header().Get("Retry-After"); got != "1" {
		t.Errorf("Retry-After = %q, want 1", got)
	}
	testkit.WaitFor(t, time.Until(deadline), "the budget to come back after the window", func() bool {
		return s.do(t, http.MethodGet, "/v1/audit", token, nil).Code == http.StatusOK
	})
}

// TestRateLimitOff checks that no limit applies when RateLimit is 0 (the
// default, and dev mode's).
func TestRateLimitOff(t *testing.T) {
	t.Parallel()
	s := newSecServer(t, secOptions{})
	for i := range 50 {
		w := s.do(t, http.MethodGet, "/v1/events", "Bearer "+s.tokens["submitter"], nil)
		if w.Code != http.StatusOK {
			t.Fatalf("request %d = %d %s, want 200", i+1, w.Code, w.Body)
		}
		if w.Header().Get("RateLimit-Limit") != "" || w.Header().Get("X-RateLimit-Limit") != "" {
			t.Fatalf("rate-limit headers without a limit: %v", w.Header())
		}
	}
}

// secPostRoutes returns the POST /v1 routes with their paths filled.
func secPostRoutes(t *testing.T, s *secServer) map[string]string {
	t.Helper()
	fake := uuid.Must(uuid.NewV7())
	paths := map[string]string{}
	for _, route := range secV1Routes(t, s.Server) {
		if method, pattern := secSplitRoute(route); method == http.MethodPost {
			paths[route] = secFillPath(pattern, fake)
		}
	}
	if len(paths) == 0 {
		t.Fatal("no POST routes")
	}
	return paths
}

// TestBodyLimitDeclared checks that a body whose declared Content-Length is
// over the limit is refused with 413 payload-too-large on every POST route,
// before any of it is read.
func TestBodyLimitDeclared(t *testing.T) {
	t.Parallel()
	s := newSecServer(t, secOptions{maxPayload: 1024})
	for route, path := range secPostRoutes(t, s) {
		t.Run(route, func(t *testing.T) {
			body := &countingReader{r: strings.NewReader(`{"reason":"` + strings.Repeat("x", 4<<20) + `"}`)}
			r := httptest.NewRequestWithContext(t.Context(), http.MethodPost, path, body)
			r.ContentLength = 4<<20 + 14
			r.Header.Set("Authorization", "Bearer "+s.tokens["operator"])
			r.Header.Set("Content-Type", "application/json")
			w := httptest.NewRecorder()
			s.ServeHTTP(w, r)
			if w.Code != http.StatusRequestEntityTooLarge {
				t.Fatalf("= %d %s, want 413", w.Code, w.Body)
			}
			secCheckProblem(t, w, converge.ETOOLARGE)
			// The detail names the configured limit: max_payload_bytes on
			// the routes that take a payload, 1 MiB on the others.
			var p api.Problem
			_ = json.Unmarshal(w.Body.Bytes(), &p)
			want := "limit of 1048576 bytes"
			if route == "POST /v1/events" || route == "POST /v1/workflow-runs" {
				want = "max_payload_bytes 1024"
			}
			if !strings.Contains(p.Detail, want) {
				t.Errorf("detail %q, want it to name %q", p.Detail, want)
			}
			if n := body.n.Load(); n != 0 {
				t.Errorf("the server read %d bytes of a body it refused", n)
			}
		})
	}
}

// TestBodyLimitStreamed sends bodies without a Content-Length (chunked) that
// never end within the limit, on every POST route: the server must answer
// 413 having read at most a little past the limit.
func TestBodyLimitStreamed(t *testing.T) {
	t.Parallel()
	const maxPayload = 1024
	s := newSecServer(t, secOptions{maxPayload: maxPayload})
	for route, path := range secPostRoutes(t, s) {
		t.Run(route, func(t *testing.T) {
			// A valid JSON prefix that keeps going: the decoder has to read
			// until the limit stops it.
			body := &countingReader{r: io.MultiReader(strings.NewReader(`{"reason":"`), endless{})}
			r := httptest.NewRequestWithContext(t.Context(), http.MethodPost, path, body)
			r.ContentLength = -1
			r.Header.Set("Authorization", "Bearer "+s.tokens["operator"])
			r.Header.Set("Content-Type", "application/json")
			w := httptest.NewRecorder()
			s.ServeHTTP(w, r)
			if w.Code == http.StatusNotFound || w.Code == http.StatusConflict {
				// The route answered before reading the body (an unknown
				// id): nothing was read, which is what matters.
				if n := body.n.Load(); n > 0 {
					t.Errorf("answered %d after reading %d bytes", w.Code, n)
				}
				return
			}
			if w.Code != http.StatusRequestEntityTooLarge {
				t.Fatalf("= %d %s, want 413", w.Code, w.Body)
			}
			secCheckProblem(t, w, converge.ETOOLARGE)
			if route == "POST /v1/events" || route == "POST /v1/workflow-runs" {
				var p api.Problem
				_ = json.Unmarshal(w.Body.Bytes(), &p)
				if !strings.Contains(p.Detail, "max_payload_bytes 1024") {
					t.Errorf("detail %q, want it to name max_payload_bytes 1024", p.Detail)
				}
			}
			if n, most := body.n.Load(), int64(2<<20); n > most {
				t.Errorf("the server read %d bytes, more than %d", n, most)
			}
		})
	}
}

// TestBodyLimitOverTheWire sends POST /v1/events over a real connection with
// a body far larger than the limit, writing it in the background, and
// checks that the 413 comes back while the client is still writing: the
// server neither reads the whole body nor waits for it.
func TestBodyLimitOverTheWire(t *testing.T) {
	t.Parallel()
	s := newSecServer(t, secOptions{maxPayload: 1024})
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	for _, declared := range []bool{true, false} {
		t.Run(fmt.Sprintf("content-length=%v", declared), func(t *testing.T) {
			const total = 256 << 20 // far more than socket buffers hold
			conn, err := net.Dial("tcp", srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			head := "POST /v1/events HTTP/1.1\r\nHost: converge\r\nAuthorization: Bearer " + s.tokens["submitter"] +
				"\r\nContent-Type: application/json\r\n"
			if declared {
				head += fmt.Sprintf("Content-Length: %d\r\n\r\n", total)
			} else {
				head += "Transfer-Encoding: chunked\r\n\r\n"
			}
			if _, err := io.WriteString(conn, head); err != nil {
				t.Fatal(err)
			}
			var written atomic.Int64
			done := make(chan struct{})
			go func() {
				defer close(done)
				frame := func(b []byte) []byte {
					if declared {
						return b
					}
					return append([]byte(fmt.Sprintf("%x\r\n", len(b))), append(b, "\r\n"...)...)
				}
				chunk := frame(bytes.Repeat([]byte("a"), 64<<10))
				_, _ = conn.Write(frame([]byte(`{"kind":"build","resource":"app/web","version":1,"payload":{"x":"`)))
				for written.Load() < total {
					n, err := conn.Write(chunk)
					written.Add(int64(n))
					if err != nil {
						return
					}
				}
			}()
			_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatalf("read response (after writing %d bytes): %v", written.Load(), err)
			}
			atAnswer := written.Load()
			data, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusRequestEntityTooLarge {
				t.Fatalf("status = %d %s, want 413", resp.StatusCode, data)
			}
			if !bytes.Contains(data, []byte(`"urn:converge:problem:payload-too-large"`)) {
				t.Errorf("body = %s, want a payload-too-large problem", data)
			}
			if atAnswer >= total {
				t.Errorf("the answer came after the client wrote the whole %d-byte body", total)
			}
			_ = conn.Close()
			<-done
			t.Logf("413 after the client wrote %d of %d bytes", atAnswer, int64(total))
		})
	}
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// endless is a reader of 'x' without end.
type endless struct{}

func (endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'x'
	}
	return len(p), nil
}

// TestPayloadLimits sends the amplification cases of SPEC §4 (issue 21)
// to POST /v1/events: numbers whose plain decimal form is over 64
// characters or beyond a double, nesting past 64 levels, NUL and lone
// surrogate escapes are each 422 invalid-request naming payload, with no
// row written; the largest accepted forms pass, and what comes back is
// never much larger than what was sent.
func TestPayloadLimits(t *testing.T) {
	t.Parallel()
	s := newSecServer(t, secOptions{isolated: true})
	auth := "Bearer " + s.tokens["submitter"]
	nested := func(levels int) string { // the payload object is level 1
		return `{"a":` + strings.Repeat("[", levels-1) + strings.Repeat("]", levels-1) + `}`
	}
	twenty := func(n string) string {
		parts := make([]string, 20)
		for i := range parts {
			parts[i] = fmt.Sprintf(`"n%d":%s`, i, n)
		}
		return "{" + strings.Join(parts, ",") + "}"
	}
	refused := map[string]string{
		"1e131071 twenty times": twenty("1e131071"),
		"1e64":                  `{"n":1e64}`,
		"65 digits":             `{"n":` + strings.Repeat("9", 65) + `}`,
		"1e-63":                 `{"n":1e-63}`,
		"-1e308":                `{"n":-1e308}`,
		"1e309 (not a double)":  `{"n":1e309}`,
		"1e-400":                `{"n":1e-400}`,
		"0e-100":                `{"n":0e-100}`,
		"65 levels":             nested(65),
		"5000 levels":           nested(5000),
		// Past encoding/json's own 10000: still the payload's 422, not
		// 400 malformed-json (the body is valid JSON).
		"20000 levels":            nested(20000),
		"12000 levels of objects": `{"a":` + strings.Repeat(`{"a":`, 12000) + "1" + strings.Repeat("}", 12001),
		"65 levels of objects":    strings.Repeat(`{"a":`, 65) + "1" + strings.Repeat("}", 65),
		"NUL escape":              `{"s":"a\u0000b"}`,
		"lone high surrogate":     `{"s":"\ud800"}`,
		"lone low surrogate":      `{"s":"\udc00x"}`,
		"reversed surrogates":     `{"s":"\udc00\ud800"}`,
		"surrogate in a key":      `{"\ud83d":1}`,
		// 2,000 numbers of 4 characters that would print as 51: past the
		// growth allowance.
		"many growing numbers": `{"a":[` + strings.TrimSuffix(strings.Repeat("1e50,", 2000), ",") + `]}`,
	}
	before := secSnapshot(t, s.pool)
	for name, payload := range refused {
		body := fmt.Sprintf(`{"kind":"build","resource":"app/limits","version":1,"payload":%s}`, payload)
		w := s.do(t, http.MethodPost, "/v1/events", auth, strings.NewReader(body))
		if w.Code != http.StatusUnprocessableEntity {
			t.Errorf("%s: %d %.300s, want 422", name, w.Code, w.Body)
			continue
		}
		secCheckProblem(t, w, "invalid-request")
		var p api.Problem
		_ = json.Unmarshal(w.Body.Bytes(), &p)
		if len(p.Errors) != 1 || p.Errors[0].Field != "payload" {
			t.Errorf("%s: errors %+v, want one naming payload", name, p.Errors)
		}
		if strings.Contains(p.Detail, "numeric") || strings.Contains(p.Detail, "jsonb") {
			t.Errorf("%s: detail %q carries database text", name, p.Detail)
		}
	}
	after := secSnapshot(t, s.pool)
	for table, fp := range before {
		if after[table] != fp {
			t.Errorf("table %s changed: %s → %s", table, fp, after[table])
		}
	}

	accepted := map[string]string{
		"1e63 twenty times":   twenty("1e63"),
		"64 digits":           `{"n":-` + strings.Repeat("9", 63) + `}`,
		"1e-61":               `{"n":1e-61}`,
		"exact":               `{"n":0.1000000000000000055511151231257827,"m":12345678901234567890123456789}`,
		"64 levels":           nested(64),
		"64 levels of object": strings.Repeat(`{"a":`, 64) + "1" + strings.Repeat("}", 64),
		"surrogate pair":      `{"s":"\ud83d\ude00"}`,
		"escaped backslash":   `{"s":"\\u0000 \\ud800"}`,
	}
	for name, payload := range accepted {
		body := fmt.Sprintf(`{"kind":"build","resource":"app/limits-%s","version":1,"payload":%s}`, uuid.NewString(), payload)
		w := s.do(t, http.MethodPost, "/v1/events", auth, strings.NewReader(body))
		if w.Code != http.StatusAccepted {
			t.Errorf("%s: %d %.300s, want 202", name, w.Code, w.Body)
			continue
		}
		var res struct {
			Event struct {
				ID string `json:"id"`
			} `json:"event"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &res); err != nil {
			t.Fatal(err)
		}
		got := s.do(t, http.MethodGet, "/v1/events/"+res.Event.ID, auth, nil)
		var ev struct {
			Payload json.RawMessage `json:"payload"`
		}
		if err := json.Unmarshal(got.Body.Bytes(), &ev); err != nil {
			t.Fatalf("%s: %v %s", name, err, got.Body)
		}
		if len(ev.Payload) > 16*len(payload)+1024 {
			t.Errorf("%s: sent %d bytes, stored %d", name, len(payload), len(ev.Payload))
		}
		if name == "exact" && !strings.Contains(string(ev.Payload), "0.1000000000000000055511151231257827") {
			t.Errorf("exact: came back as %s", ev.Payload)
		}
	}
}

// TestRequestIDHeader checks that X-Request-Id is kept only when it is 1
// to 128 characters of [A-Za-z0-9._:-] and replaced otherwise, and that
// the audit log records the id used.
func TestRequestIDHeader(t *testing.T) {
	t.Parallel()
	s := newSecServer(t, secOptions{})
	auth := "Bearer " + s.tokens["operator"]
	cases := map[string]bool{
		"abc-123":                  true,
		"a.b_c:d-e":                true,
		strings.Repeat("x", 128):   true,
		strings.Repeat("x", 129):   false,
		strings.Repeat("x", 6<<10): false,
		"has space":                false,
		"semi;colon":               false,
		"quote\"":                  false,
		"ü":                        false,
		"<script>":                 false,
		"a/b":                      false,
		"\x00":                     false,
	}
	for id, kept := range cases {
		r := httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/v1/events", nil)
		r.Header.Set("Authorization", auth)
		r.Header.Set("X-Request-Id", id)
		w := httptest.NewRecorder()
		s.ServeHTTP(w, r)
		got := w.Header().Get("X-Request-Id")
		if kept && got != id {
			t.Errorf("X-Request-Id %.40q came back as %q, want it kept", id, got)
		}
		if !kept && (got == id || !api.ValidRequestID(got)) {
			t.Errorf("X-Request-Id %.40q came back as %.40q, want a fresh valid one", id, got)
		}
	}

	// The audit log records the id used: a forged one is not written.
	w := s.do(t, http.MethodPost, "/v1/events", auth, strings.NewReader(`{"kind":"build","resource":"app/reqid-`+uuid.NewString()+`","version":1}`))
	var accepted struct {
		Run struct {
			ID string `json:"id"`
		} `json:"run"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &accepted); err != nil {
		t.Fatalf("accept = %d %s", w.Code, w.Body)
	}
	forged := "forged id\r\n" + strings.Repeat("z", 6<<10)
	r := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/v1/runs/"+accepted.Run.ID+"/cancel", nil)
	r.Header.Set("Authorization", auth)
	r.Header["X-Request-Id"] = []string{forged}
	cw := httptest.NewRecorder()
	s.ServeHTTP(cw, r)
	if cw.Code != http.StatusOK {
		t.Fatalf("cancel = %d %s", cw.Code, cw.Body)
	}
	used := cw.Header().Get("X-Request-Id")
	var recorded string
	if err := s.pool.QueryRow(t.Context(), `SELECT request_id FROM converge_audit WHERE targets ? $1`, accepted.Run.ID).Scan(&recorded); err != nil {
		t.Fatalf("audit entry: %v", err)
	}
	if recorded != used || !api.ValidRequestID(recorded) {
		t.Errorf("audit request_id = %.40q, answer's X-Request-Id %q: want the same, valid", recorded, used)
	}
}

// TestHeadersTooLarge checks that request headers over 64 KiB are answered
// 431 headers-too-large with a problem body, before authentication, and
// that headers just under it pass.
func TestHeadersTooLarge(t *testing.T) {
	t.Parallel()
	s := newSecServer(t, secOptions{})
	for _, target := range []string{"/v1/events", "/healthz", "/nowhere"} {
		r := httptest.NewRequestWithContext(t.Context(), http.MethodGet, target, nil)
		r.Header.Set("X-Big", strings.Repeat("a", api.MaxHeaderBytes))
		w := httptest.NewRecorder()
		s.ServeHTTP(w, r)
		if w.Code != http.StatusRequestHeaderFieldsTooLarge {
			t.Fatalf("%s = %d %s, want 431", target, w.Code, w.Body)
		}
		secCheckProblem(t, w, "headers-too-large")
		if w.Header().Get("X-Request-Id") == "" {
			t.Errorf("%s: no X-Request-Id", target)
		}
	}
	r := httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/v1/events", nil)
	r.Header.Set("Authorization", "Bearer "+s.tokens["viewer"])
	r.Header.Set("X-Big", strings.Repeat("a", api.MaxHeaderBytes-1024))
	w := httptest.NewRecorder()
	s.ServeHTTP(w, r)
	if w.Code != http.StatusOK {
		t.Errorf("headers under the limit = %d %s, want 200", w.Code, w.Body)
	}
}

// TestMethods checks HTTP method handling on every route the router has:
// each GET route answers HEAD as it answers GET, and a method a route does
// not take is 405 method-not-allowed with an Allow header naming the ones
// it does and no other, including POST-only routes that a GET parameter
// route would otherwise take (GET /v1/dead-letters/redrive).
func TestMethods(t *testing.T) {
	t.Parallel()
	s := newSecServer(t, secOptions{})
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	auth := "Bearer " + s.tokens["operator"]
	fake := uuid.Must(uuid.NewV7())
	byPath := map[string][]string{}
	for _, route := range secV1Routes(t, s.Server) {
		method, pattern := secSplitRoute(route)
		byPath[secFillPath(pattern, fake)] = append(byPath[secFillPath(pattern, fake)], method)
	}
	for _, p := range []string{"/healthz", "/readyz", "/metrics", "/openapi.json"} {
		byPath[p] = []string{http.MethodGet}
	}
	send := func(method, path string) (*http.Response, []byte) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), method, srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", auth)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		return resp, body
	}
	for path, methods := range byPath {
		for _, m := range methods {
			if m != http.MethodGet {
				continue
			}
			get, _ := send(http.MethodGet, path)
			head, body := send(http.MethodHead, path)
			if head.StatusCode != get.StatusCode || len(body) != 0 {
				t.Errorf("HEAD %s = %d with %d bytes, GET = %d", path, head.StatusCode, len(body), get.StatusCode)
			}
		}
		for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
			if slices.Contains(methods, m) {
				continue
			}
			resp, body := send(m, path)
			if resp.StatusCode != http.StatusMethodNotAllowed {
				t.Errorf("%s %s = %d %.200s, want 405", m, path, resp.StatusCode, body)
				continue
			}
			// Exactly the path's methods: not those of a parameter route
			// the path also matches (PUT /v1/dead-letters/redrive is not
			// the dead letter "redrive", whose GET would be refused).
			allow := strings.Split(resp.Header.Get("Allow"), ", ")
			want := slices.Clone(methods)
			if slices.Contains(methods, http.MethodGet) {
				want = append(want, http.MethodHead)
			}
			slices.Sort(allow)
			slices.Sort(want)
			if !slices.Equal(allow, want) {
				t.Errorf("%s %s: Allow %q, want %v", m, path, resp.Header.Get("Allow"), want)
			}
			var p api.Problem
			if resp.Header.Get("Content-Type") != "application/problem+json" || json.Unmarshal(body, &p) != nil || p.Type != api.ProblemType("method-not-allowed") {
				t.Errorf("%s %s: %q, want a method-not-allowed problem", m, path, body)
			}
		}
	}
}

// secSecondsIn reports whether v is a whole number of seconds from lo to hi.
func secSecondsIn(v string, lo, hi int) bool {
	n, err := strconv.Atoi(v)
	return err == nil && n >= lo && n <= hi
}
