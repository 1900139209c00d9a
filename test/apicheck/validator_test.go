package apicheck_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
)

// validator checks responses against the OpenAPI document the server
// itself serves at /openapi.json, with kin-openapi: the status must be
// documented for the operation (no "default"), the body must match the
// schema of its content type, and the documented headers must be there.
type validator struct {
	doc    *openapi3.T
	routes []route

	mu   sync.Mutex
	seen map[string]map[int]bool // operation -> statuses answered
}

// route is one operation of the document with a matcher for its path. A
// resource key holds slashes, so a path's last {resource} parameter
// matches the rest of the path; every other parameter one segment.
type route struct {
	re     *regexp.Regexp
	names  []string
	method string
	r      *routers.Route
}

func newValidator(t *testing.T, base string) *validator {
	t.Helper()
	resp, err := http.Get(base + "/openapi.json")
	if err != nil {
		t.Fatalf("GET /openapi.json: %v", err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /openapi.json: %d %v", resp.StatusCode, err)
	}
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(raw)
	if err != nil {
		t.Fatalf("kin-openapi cannot load the served document: %v", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("kin-openapi finds the served document invalid: %v", err)
	}
	v := &validator{doc: doc, seen: map[string]map[int]bool{}}
	param := regexp.MustCompile(`\{([a-z_]+)\}`)
	for path, item := range doc.Paths.Map() {
		names := []string{}
		for _, m := range param.FindAllStringSubmatch(path, -1) {
			names = append(names, m[1])
		}
		expr := regexp.QuoteMeta(path)
		for i, n := range names {
			seg := `([^/]+)`
			if n == "resource" && i == len(names)-1 {
				seg = `(.+)`
			}
			expr = strings.Replace(expr, regexp.QuoteMeta("{"+n+"}"), seg, 1)
		}
		re := regexp.MustCompile("^" + expr + "$")
		for method, op := range item.Operations() {
			v.routes = append(v.routes, route{re: re, names: names, method: method,
				r: &routers.Route{Spec: doc, Path: path, PathItem: item, Method: method, Operation: op}})
		}
	}
	return v
}

// operations lists every operation of the document as "METHOD path".
func (v *validator) operations() []string {
	var ops []string
	for _, r := range v.routes {
		ops = append(ops, r.method+" "+r.r.Path)
	}
	sort.Strings(ops)
	return ops
}

// find returns the operation of a request and its path parameters. A HEAD
// request is checked against its GET operation (every GET answers HEAD).
func (v *validator) find(method, path string) (*routers.Route, map[string]string) {
	if method == http.MethodHead {
		method = http.MethodGet
	}
	// A path of the document without parameters is that path for every
	// method: GET /v1/dead-letters/redrive is not the dead letter
	// "redrive" but a route without GET (405).
	for i := range v.routes {
		if r := &v.routes[i]; len(r.names) == 0 && r.r.Path == path && r.method != method {
			literalOnly := true
			for j := range v.routes {
				if v.routes[j].r.Path == path && v.routes[j].method == method {
					literalOnly = false
				}
			}
			if literalOnly {
				return nil, nil
			}
		}
	}
	var best *route
	var bestMatch []string
	for i := range v.routes {
		r := &v.routes[i]
		if r.method != method {
			continue
		}
		m := r.re.FindStringSubmatch(path)
		if m == nil {
			continue
		}
		// A literal path (/v1/dead-letters/redrive) wins over a template
		// (/v1/dead-letters/{id}/redrive is longer anyway).
		if best == nil || len(r.names) < len(best.names) {
			best, bestMatch = r, m
		}
	}
	if best == nil {
		return nil, nil
	}
	params := map[string]string{}
	for i, n := range best.names {
		params[n] = bestMatch[i+1]
	}
	return best.r, params
}

// check validates one exchange and records it. It returns the problems
// found (none when the response matches the document).
func (v *validator) check(req *http.Request, reqBody []byte, status int, header http.Header, body []byte) error {
	route, params := v.find(req.Method, req.URL.Path)
	if route == nil {
		// A method the document has not on this path: 405 with Allow and a
		// problem body (SPEC §4) is the only right answer.
		if status == http.StatusMethodNotAllowed && header.Get("Allow") != "" &&
			header.Get("Content-Type") == "application/problem+json" {
			return nil
		}
		return fmt.Errorf("%s %s is not in the document (answered %d)", req.Method, req.URL.Path, status)
	}
	op := route.Method + " " + route.Path
	v.mu.Lock()
	if v.seen[op] == nil {
		v.seen[op] = map[int]bool{}
	}
	v.seen[op][status] = true
	v.mu.Unlock()
	opts := &openapi3filter.Options{
		IncludeResponseStatus: true,
		MultiError:            true,
		AuthenticationFunc:    openapi3filter.NoopAuthenticationFunc,
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: opts},
		Status:                 status,
		Header:                 header,
		Options:                opts,
	}
	in.SetBodyBytes(body)
	if req.Method == http.MethodHead {
		// kin-openapi does not check HEAD: the status must be the GET's.
		if route.Operation.Responses.Status(status) == nil {
			return fmt.Errorf("HEAD %s: status %d is not documented for GET", req.URL.Path, status)
		}
		if len(body) != 0 {
			return fmt.Errorf("HEAD %s answered a body of %d bytes", req.URL.Path, len(body))
		}
		return nil
	}
	if err := openapi3filter.ValidateResponse(req.Context(), in); err != nil {
		return fmt.Errorf("%s %s -> %d: %w\nbody: %s", req.Method, req.URL.RequestURI(), status, err, truncate(body, 600))
	}
	// A request the server took must be one the document allows: else the
	// server is looser than its document.
	if status >= 200 && status < 300 {
		sent := req.Clone(req.Context())
		sent.Body = io.NopCloser(bytes.NewReader(reqBody))
		rin := &openapi3filter.RequestValidationInput{Request: sent, PathParams: params, Route: route, Options: opts}
		if err := openapi3filter.ValidateRequest(req.Context(), rin); err != nil {
			return fmt.Errorf("%s %s was answered %d but the document refuses the request: %w\nrequest body: %s",
				req.Method, req.URL.RequestURI(), status, err, truncate(reqBody, 300))
		}
	}
	return nil
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}

// client sends requests as one token and validates every answer.
type client struct {
	t     *testing.T
	v     *validator
	base  string
	token string
}

// exchange is one answer.
type exchange struct {
	status int
	header http.Header
	body   []byte
}

// send sends a request with a raw body (nil for none) and content type,
// validates the answer and returns it.
func (c client) send(method, path, contentType string, body []byte, header ...string) exchange {
	c.t.Helper()
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(c.t.Context(), method, c.base+path, r)
	if err != nil {
		c.t.Fatalf("request: %v", err)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatalf("%s %s: read: %v", method, path, err)
	}
	if resp.StatusCode >= 500 {
		c.t.Errorf("%s %s answered %d: %s", method, path, resp.StatusCode, truncate(b, 400))
	}
	if err := c.v.check(req, body, resp.StatusCode, resp.Header, b); err != nil {
		c.t.Errorf("the answer does not match the document: %v", err)
	}
	return exchange{status: resp.StatusCode, header: resp.Header, body: b}
}

// json sends a JSON body (a string, sent as is).
func (c client) json(method, path, body string) exchange {
	c.t.Helper()
	if body == "" {
		return c.send(method, path, "", nil)
	}
	return c.send(method, path, "application/json", []byte(body))
}
