package api_test

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/api"
	"github.com/converge-run/converge/jobs"
	"github.com/converge-run/converge/store"
	"github.com/converge-run/converge/test/pgtest"
)

// evAdminToken is the CONVERGE_ADMIN_TOKEN of every test server.
const evAdminToken = "test-admin-token-0123456789"

// evMaxPayload is the payload limit of every test server, kept small so that
// the oversized cases stay cheap.
const evMaxPayload = 4096

// evStack is the real service in-process: a database, the store, an
// insert-only River client and the HTTP API on a loopback server.
type evStack struct {
	url   string
	pool  *pgxpool.Pool
	store *store.Store
	srv   *httptest.Server
}

// evNewStack builds the stack on the database at databaseURL, or on the test
// package's shared database when databaseURL is empty.
func evNewStack(t *testing.T, databaseURL string) *evStack {
	t.Helper()
	var pool *pgxpool.Pool
	if databaseURL == "" {
		pool = pgtest.Pool(t)
	} else {
		pool = pgtest.OpenPool(t, databaseURL, 3)
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	svc, err := jobs.NewService(pool, jobs.Config{Logger: logger})
	if err != nil {
		t.Fatalf("river client: %v", err)
	}
	st := svc.Store()
	srv := httptest.NewServer(api.New(api.Config{
		Store: st, Accept: svc.GroupCommit().EventAccept,
		Kinds: converge.KindPolicies{
			"build":  {Name: "build", MaxAttempts: 5},
			"deploy": {Name: "deploy", MaxAttempts: 3},
		},
		Workflows:       evWorkflows(t),
		MaxPayloadBytes: evMaxPayload,
		AdminToken:      evAdminToken,
		Logger:          logger,
	}))
	t.Cleanup(srv.Close)
	return &evStack{url: srv.URL, pool: pool, store: st, srv: srv}
}

// evWorkflows is the workflows of every test server: release, SPEC §10's
// pipeline without its approval.
func evWorkflows(t *testing.T) map[string]*converge.Workflow {
	t.Helper()
	w, err := converge.NewWorkflow("release", map[string]*converge.WorkflowStep{
		"build":   {Kind: "build"},
		"staging": {Kind: "deploy", Resource: "staging/{resource}", Needs: []string{"build"}},
		"canary":  {Kind: "deploy", Resource: "canary/{resource}", Needs: []string{"build"}},
		"prod":    {Kind: "deploy", Resource: "prod/{resource}", Needs: []string{"staging", "canary"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return map[string]*converge.Workflow{"release": w}
}

// evResponse is an HTTP answer with its body read.
type evResponse struct {
	status int
	header http.Header
	body   []byte
}

// json decodes the body into a generic map.
func (r *evResponse) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("body is not a JSON object: %v\n%s", err, r.body)
	}
	return m
}

// do sends a request with the admin token unless headers set Authorization
// (an empty value sends none).
func (s *evStack) do(t *testing.T, method, path string, body io.Reader, headers map[string]string) *evResponse {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, s.url+path, body)
	if err != nil {
		t.Fatalf("new request: %v", err)
	}
	req.Header.Set("Authorization", "Bearer "+evAdminToken)
	for k, v := range headers {
		if v == "" {
			req.Header.Del(k)
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := s.srv.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return &evResponse{status: resp.StatusCode, header: resp.Header, body: b}
}

// post sends body to POST /v1/events as JSON.
func (s *evStack) post(t *testing.T, body string) *evResponse {
	t.Helper()
	return s.do(t, http.MethodPost, "/v1/events", strings.NewReader(body), map[string]string{"Content-Type": "application/json"})
}

// get sends GET path with the admin token.
func (s *evStack) get(t *testing.T, path string) *evResponse {
	t.Helper()
	return s.do(t, http.MethodGet, path, nil, nil)
}

// evWantStatus fails the test unless r has status want.
func evWantStatus(t *testing.T, r *evResponse, want int) {
	t.Helper()
	if r.status != want {
		t.Fatalf("status %d, want %d; body: %s", r.status, want, r.body)
	}
}

// evWantProblem checks that r is a problem of status and slug and returns
// its body.
func evWantProblem(t *testing.T, r *evResponse, status int, slug string) map[string]any {
	t.Helper()
	evWantStatus(t, r, status)
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type %q, want application/problem+json", ct)
	}
	p := r.json(t)
	if p["type"] != "urn:converge:problem:"+slug {
		t.Errorf("type %v, want urn:converge:problem:%s", p["type"], slug)
	}
	if p["status"] != float64(status) {
		t.Errorf("status field %v, want %d", p["status"], status)
	}
	for _, k := range []string{"title", "detail"} {
		if s, _ := p[k].(string); s == "" {
			t.Errorf("problem has no %s: %s", k, r.body)
		}
	}
	return p
}

// evFields returns the field names of a validation problem's errors.
func evFields(t *testing.T, p map[string]any) []string {
	t.Helper()
	list, _ := p["errors"].([]any)
	var fields []string
	for _, e := range list {
		m, _ := e.(map[string]any)
		f, _ := m["field"].(string)
		if msg, _ := m["message"].(string); msg == "" {
			t.Errorf("field error without a message: %v", m)
		}
		fields = append(fields, f)
	}
	return fields
}

// evRowCounts counts the rows an accepted event writes.
func evRowCounts(t *testing.T, pool *pgxpool.Pool) [4]int {
	t.Helper()
	var c [4]int
	err := pool.QueryRow(t.Context(), `SELECT
		(SELECT count(*) FROM converge_events), (SELECT count(*) FROM converge_runs),
		(SELECT count(*) FROM river_job), (SELECT count(*) FROM converge_streams)`).Scan(&c[0], &c[1], &c[2], &c[3])
	if err != nil {
		t.Fatalf("count rows: %v", err)
	}
	return c
}

// evBody builds a POST /v1/events body.
func evBody(kind, resource string, version int64, payload string) string {
	var b bytes.Buffer
	b.WriteString(`{"kind":`)
	k, _ := json.Marshal(kind)
	b.Write(k)
	b.WriteString(`,"resource":`)
	r, _ := json.Marshal(resource)
	b.Write(r)
	b.WriteString(`,"version":`)
	v, _ := json.Marshal(version)
	b.Write(v)
	if payload != "" {
		b.WriteString(`,"payload":`)
		b.WriteString(payload)
	}
	b.WriteString(`}`)
	return b.String()
}
