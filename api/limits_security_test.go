package api_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/converge-run/converge"
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
		if w := s.do(t, http.MethodGet, "/v1/events", "Bearer "+s.tokens["submitter"], nil); w.Code != http.StatusOK {
			t.Fatalf("request %d = %d %s, want 200", i+1, w.Code, w.Body)
		}
	}
	w := s.do(t, http.MethodGet, "/v1/events", "Bearer "+s.tokens["submitter"], nil)
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("request 4 = %d %s, want 429", w.Code, w.Body)
	}
	secCheckProblem(t, w, "rate-limited")
	if got := w.Header().Get("Retry-After"); got != "60" {
		t.Errorf("Retry-After = %q, want 60", got)
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
		if w.Header().Get("X-RateLimit-Limit") != "" {
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
