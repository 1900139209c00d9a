package testkit

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Client sends a test's requests to a converge (or any JSON API) at Base.
type Client struct {
	// Base is the URL the paths are under ("http://127.0.0.1:8080").
	Base string
	// Token, when set, is sent as the bearer token: with every request,
	// or, when TokenPrefix is set, only with paths under it (say "/v1/",
	// so that probes and scrapes go without).
	Token       string
	TokenPrefix string
	// Timeout bounds each request; zero waits as long as the test runs.
	Timeout time.Duration
	// UseNumber decodes the numbers of an answer as json.Number rather
	// than float64.
	UseNumber bool
}

// Answer is an HTTP answer as a test reads it.
type Answer struct {
	Status int
	Header http.Header
	// Body is the answer decoded as a JSON object, nil when it is not one;
	// Raw is the answer as it came.
	Body map[string]any
	Raw  string
	// Took is how long the answer took, headers and body.
	Took time.Duration
}

// Do sends method path to c.Base, with body encoded as JSON when not nil,
// and reads the whole answer. A request that gets no answer fails the
// test.
func (c Client) Do(t testing.TB, method, path string, body any) Answer {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatalf("%s %s: encode the body: %v", method, path, err)
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, c.Base+path, r)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	if c.Token != "" && strings.HasPrefix(path, c.TokenPrefix) {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	began := time.Now()
	resp, err := (&http.Client{Timeout: c.Timeout}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	a := Answer{Status: resp.StatusCode, Header: resp.Header, Raw: string(b), Took: time.Since(began)}
	if c.UseNumber {
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.UseNumber()
		_ = dec.Decode(&a.Body)
	} else {
		_ = json.Unmarshal(b, &a.Body)
	}
	return a
}
