package api_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/api"
	"github.com/converge-run/converge/jobs"
	"github.com/converge-run/converge/store"
	"github.com/converge-run/converge/test/pgtest"
	"github.com/converge-run/converge/test/testkit"
)

// This file holds the security tests' harness and the route × role table;
// the *_security_test.go files beside it hold the other security tests.

// secRouteSpec is what the security tests expect of one /v1 route.
type secRouteSpec struct {
	// role is the least role that may call the route.
	role converge.Role
	// query lists the query parameters a GET route accepts.
	query []string
}

// secRouteTable is every /v1 route the server may register, keyed like
// Server.RouteRoles ("METHOD /v1/pattern"). TestRouteRoles fails when the
// router has a route missing here, so a new route cannot ship without its
// role being decided (and tested) here.
var secRouteTable = map[string]secRouteSpec{
	"POST /v1/events":              {role: converge.RoleSubmitter},
	"GET /v1/events":               {role: converge.RoleSubmitter, query: []string{"kind", "resource", "status", "cursor", "limit"}},
	"GET /v1/events/{id}":          {role: converge.RoleSubmitter},
	"POST /v1/runs/{id}/cancel":    {role: converge.RoleOperator},
	"POST /v1/runs/{id}/approve":   {role: converge.RoleOperator},
	"POST /v1/runs/{id}/reject":    {role: converge.RoleOperator},
	"GET /v1/quarantine":           {role: converge.RoleViewer},
	"POST /v1/quarantine/{kind}/*": {role: converge.RoleOperator},
	"GET /v1/resources/{kind}/*":   {role: converge.RoleSubmitter},
	"GET /v1/audit":                {role: converge.RoleViewer, query: []string{"cursor", "limit", "target"}},
	"GET /v1/deliveries":           {role: converge.RoleViewer, query: []string{"source", "status", "cursor", "limit"}},
	"GET /v1/deliveries/{id}":      {role: converge.RoleViewer},

	"POST /v1/workflow-runs": {role: converge.RoleSubmitter},
	"GET /v1/workflow-runs": {role: converge.RoleSubmitter,
		query: []string{"workflow", "resource", "status", "cursor", "limit"}},
	"GET /v1/workflow-runs/{id}":         {role: converge.RoleSubmitter},
	"POST /v1/workflow-runs/{id}/cancel": {role: converge.RoleOperator},

	"GET /v1/dead-letters": {role: converge.RoleViewer,
		query: []string{"status", "kind", "resource", "reason", "q", "since", "until", "cursor", "limit"}},
	"GET /v1/dead-letters/{id}":          {role: converge.RoleViewer},
	"POST /v1/dead-letters/{id}/redrive": {role: converge.RoleOperator},
	"POST /v1/dead-letters/{id}/discard": {role: converge.RoleOperator},
	"POST /v1/dead-letters/redrive":      {role: converge.RoleOperator},
	"POST /v1/dead-letters/discard":      {role: converge.RoleOperator},
	"POST /v1/dead-letters/purge":        {role: converge.RoleOperator},
}

// secPrincipal is one way of calling the API in the route × role test.
type secPrincipal struct {
	name   string
	header string // the Authorization header; "" sends none
	role   converge.Role
}

// secOptions configures a test server.
type secOptions struct {
	// isolated gives the server a database of its own, for tests that
	// compare the whole database before and after.
	isolated   bool
	rateLimit  int
	rateWindow time.Duration
	maxPayload int64
}

// secServer is a real API server on a pgtest database, with a River client
// (insert-only), a token per role and its log output captured.
type secServer struct {
	*api.Server
	store *store.Store
	pool  *pgxpool.Pool
	logs  *testkit.Buffer
	admin string
	// tokens maps "submitter", "viewer", "operator" and "revoked" (a
	// revoked operator token) to a token.
	tokens map[string]string
}

var secKinds = converge.KindPolicies{
	"build":  {Name: "build", MaxAttempts: 3, Concurrency: 1, Timeout: time.Second},
	"deploy": {Name: "deploy", MaxAttempts: 2, Concurrency: 1, Timeout: time.Second},
}

func newSecServer(t *testing.T, o secOptions) *secServer {
	t.Helper()
	var pool *pgxpool.Pool
	if o.isolated {
		pool = pgtest.OpenPool(t, pgtest.NewDatabase(t), 3)
	} else {
		pool = pgtest.Pool(t)
	}
	kinds := map[string]*jobs.Kind{}
	for name, k := range secKinds {
		kinds[name] = &jobs.Kind{KindPolicy: k}
	}
	logs := &testkit.Buffer{}
	logger := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	svc, err := jobs.NewService(pool, jobs.Config{Kinds: kinds, Work: false, Logger: logger})
	if err != nil {
		t.Fatalf("river client: %v", err)
	}
	st := svc.Store()
	if o.maxPayload == 0 {
		o.maxPayload = 262144
	}
	s := &secServer{store: st, pool: pool, logs: logs, admin: store.NewTokenSecret(), tokens: map[string]string{}}
	s.Server = api.New(api.Config{
		Store: st, Accept: svc.GroupCommit().EventAccept, Kinds: secKinds, MaxPayloadBytes: o.maxPayload, AdminToken: s.admin, Logger: logger,
		RateLimit: o.rateLimit, RateWindow: o.rateWindow,
	})
	suffix := uuid.NewString()[:8]
	audit := converge.AuditEntry{Actor: "test", Role: string(converge.RoleOperator)}
	for _, role := range []converge.Role{converge.RoleSubmitter, converge.RoleViewer, converge.RoleOperator} {
		secret, _, err := st.TokenCreate(t.Context(), "sec-"+string(role)+"-"+suffix, role, audit)
		if err != nil {
			t.Fatalf("create token: %v", err)
		}
		s.tokens[string(role)] = secret
	}
	secret, _, err := st.TokenCreate(t.Context(), "sec-revoked-"+suffix, converge.RoleOperator, audit)
	if err != nil {
		t.Fatalf("create token: %v", err)
	}
	if err := st.TokenRevoke(t.Context(), "sec-revoked-"+suffix, audit); err != nil {
		t.Fatalf("revoke token: %v", err)
	}
	s.tokens["revoked"] = secret
	return s
}

// principals returns every way of calling: without a token, with tokens
// the server does not know, a revoked one, and one per role (and admin).
func (s *secServer) principals() []secPrincipal {
	return []secPrincipal{
		{name: "no token"},
		{name: "bad token", header: "Bearer " + store.NewTokenSecret()},
		{name: "empty bearer", header: "Bearer "},
		{name: "basic scheme", header: "Basic " + s.tokens["operator"]},
		{name: "token without scheme", header: s.tokens["operator"]},
		{name: "revoked token", header: "Bearer " + s.tokens["revoked"]},
		{name: "submitter", header: "Bearer " + s.tokens["submitter"], role: converge.RoleSubmitter},
		{name: "viewer", header: "Bearer " + s.tokens["viewer"], role: converge.RoleViewer},
		{name: "operator", header: "Bearer " + s.tokens["operator"], role: converge.RoleOperator},
		{name: "admin", header: "Bearer " + s.admin, role: converge.RoleOperator},
	}
}

// do sends one request to the server in process and returns the recorder.
func (s *secServer) do(t *testing.T, method, target, auth string, body io.Reader) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequestWithContext(t.Context(), method, target, body)
	if auth != "" {
		r.Header.Set("Authorization", auth)
	}
	if body != nil {
		r.Header.Set("Content-Type", "application/json")
	}
	w := httptest.NewRecorder()
	s.ServeHTTP(w, r)
	return w
}

// secV1Routes walks the router and returns every /v1 route as "METHOD pattern".
func secV1Routes(t *testing.T, s *api.Server) []string {
	t.Helper()
	var routes []string
	err := chi.Walk(s.Routes(), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		if strings.HasPrefix(route, "/v1/") {
			routes = append(routes, method+" "+strings.TrimSuffix(strings.ReplaceAll(route, "/*/", "/"), "/"))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walk routes: %v", err)
	}
	sort.Strings(routes)
	if len(routes) == 0 {
		t.Fatal("the router has no /v1 routes")
	}
	return routes
}

var secPathParam = regexp.MustCompile(`\{[^}]+\}`)

// secFillPath turns a route pattern into a path: {kind} is a configured kind,
// any other {param} a random id, and * a resource key.
func secFillPath(pattern string, fake uuid.UUID) string {
	p := secPathParam.ReplaceAllStringFunc(pattern, func(m string) string {
		if m == "{kind}" {
			return "build"
		}
		return fake.String()
	})
	p = strings.Replace(p, "*", "app/web", 1)
	if strings.HasPrefix(pattern, "/v1/quarantine/") {
		// The release route takes only paths ending in /release.
		p += "/release"
	}
	return p
}

// secSplitRoute splits "METHOD pattern".
func secSplitRoute(route string) (method, pattern string) {
	method, pattern, _ = strings.Cut(route, " ")
	return method, pattern
}

// secCheckProblem checks that w is a problem body of the given code.
func secCheckProblem(t *testing.T, w *httptest.ResponseRecorder, code string) {
	t.Helper()
	if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type = %q, want application/problem+json", ct)
	}
	var p api.Problem
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
		t.Fatalf("problem body %q: %v", w.Body.String(), err)
	}
	if p.Type != api.ProblemType(code) || p.Status != w.Code || p.Title == "" || p.Detail == "" {
		t.Errorf("problem = %+v, want type %s and status %d", p, api.ProblemType(code), w.Code)
	}
}

// TestRouteRoles calls every /v1 route the router has, as every secPrincipal,
// and checks that authentication and the route's role are enforced: 401
// without a valid token, 403 below the role, and neither (nor a 5xx) at or
// above it. It fails when a route is missing from Server.RouteRoles or from
// secRouteTable, or when the two disagree.
func TestRouteRoles(t *testing.T) {
	t.Parallel()
	s := newSecServer(t, secOptions{})
	routes := secV1Routes(t, s.Server)
	registered := s.RouteRoles()
	walked := map[string]bool{}
	for _, route := range routes {
		walked[route] = true
		want, inTable := secRouteTable[route]
		got, inServer := registered[route]
		switch {
		case !inServer:
			t.Errorf("%s: the router has it but Server.RouteRoles does not: register it with s.route", route)
		case !inTable:
			t.Errorf("%s: not in secRouteTable: add it with the role it requires (%s)", route, got)
		case got != want.role:
			t.Errorf("%s: the server requires %s, secRouteTable says %s", route, got, want.role)
		}
	}
	for route := range registered {
		if !walked[route] {
			t.Errorf("%s: in Server.RouteRoles but not routed", route)
		}
	}
	for route := range secRouteTable {
		if !walked[route] {
			t.Errorf("%s: in secRouteTable but not routed: remove it", route)
		}
	}

	fake := uuid.Must(uuid.NewV7())
	checked := 0
	for _, route := range routes {
		spec, ok := secRouteTable[route]
		if !ok {
			continue
		}
		method, pattern := secSplitRoute(route)
		path := secFillPath(pattern, fake)
		for _, p := range s.principals() {
			t.Run(route+"/"+p.name, func(t *testing.T) {
				var body io.Reader
				if method != http.MethodGet {
					body = strings.NewReader(`{}`)
				}
				w := s.do(t, method, path, p.header, body)
				switch {
				case p.role == "":
					if w.Code != http.StatusUnauthorized {
						t.Fatalf("%s %s as %s = %d %s, want 401", method, path, p.name, w.Code, w.Body)
					}
					secCheckProblem(t, w, converge.EUNAUTHORIZED)
					if got := w.Header().Get("WWW-Authenticate"); !strings.HasPrefix(got, "Bearer") {
						t.Errorf("WWW-Authenticate = %q, want a Bearer challenge", got)
					}
				case !p.role.Includes(spec.role):
					if w.Code != http.StatusForbidden {
						t.Fatalf("%s %s as %s = %d %s, want 403", method, path, p.name, w.Code, w.Body)
					}
					secCheckProblem(t, w, converge.EFORBIDDEN)
				default:
					switch {
					case w.Code >= 200 && w.Code < 300:
					case w.Code == http.StatusNotFound, w.Code == http.StatusConflict, w.Code == http.StatusUnprocessableEntity:
					default:
						t.Fatalf("%s %s as %s = %d %s, want a 2xx, 404, 409 or 422", method, path, p.name, w.Code, w.Body)
					}
				}
			})
			checked++
		}
	}
	t.Logf("%d routes × %d principals = %d requests checked", len(routes), len(s.principals()), checked)
}
