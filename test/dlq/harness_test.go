// Package dlq_test tests the dead-letter queue end to end against a real
// PostgreSQL: the store, the HTTP API, River workers, `converge worker`
// processes killed with SIGKILL, and the `converge` CLI.
package dlq_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/api"
	"github.com/converge-run/converge/jobs"
	"github.com/converge-run/converge/store"
	"github.com/converge-run/converge/target"
	"github.com/converge-run/converge/test/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// adminToken is the CONVERGE_ADMIN_TOKEN of every test server (actor
// "admin", role operator).
const adminToken = "dlq-test-admin-token-0123456789"

// stack is the real service in-process: its own database, the store, a
// River client (with workers when asked) and the HTTP API on a loopback
// server.
type stack struct {
	url    string
	dbURL  string
	pool   *pgxpool.Pool
	store  *store.Store
	river  *river.Client[pgx.Tx]
	target *fakeTarget
	// viewer and operator are stored tokens of those roles, named
	// "viewer-1" and "operator-1".
	viewer, operator string
}

type stackOptions struct {
	// workers starts River workers for kinds build (max 2 attempts) and
	// deploy (max 1 attempt) calling the fake target.
	workers bool
	// dbURL is an existing database; a fresh one is made when empty.
	dbURL string
}

func newStack(t *testing.T, o stackOptions) *stack {
	t.Helper()
	s := &stack{dbURL: o.dbURL, target: &fakeTarget{}}
	if s.dbURL == "" {
		s.dbURL = pgtest.NewDatabase(t)
	}
	s.pool = pgtest.OpenPool(t, s.dbURL, 6)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	policies := converge.KindPolicies{}
	kinds := map[string]*jobs.Kind{}
	for name, n := range map[string]int{"build": 2, "deploy": 1} {
		policies[name] = converge.KindPolicy{Name: name, Timeout: 10 * time.Second, MaxAttempts: n,
			Backoff: converge.Backoff{Initial: 5 * time.Millisecond, Max: 20 * time.Millisecond}, Concurrency: 4}
		kinds[name] = &jobs.Kind{KindPolicy: policies[name], Target: s.target}
	}
	svc, err := jobs.NewService(s.pool, jobs.Config{
		Kinds: kinds, Work: o.workers, RescueAfter: 5 * time.Second,
		FetchCooldown: 5 * time.Millisecond, FetchPollInterval: 20 * time.Millisecond, Logger: logger,
	})
	if err != nil {
		t.Fatalf("river client: %v", err)
	}
	s.store, s.river = svc.Store(), svc.Client()
	if o.workers {
		ctx, cancel := context.WithCancel(context.Background())
		if err := s.river.Start(ctx); err != nil {
			t.Fatalf("start river: %v", err)
		}
		t.Cleanup(func() {
			sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer scancel()
			_ = s.river.StopAndCancel(sctx)
			_ = svc.GroupCommit().Drain(sctx)
			cancel()
		})
	}
	srv := httptest.NewServer(api.New(api.Config{
		Store: s.store, Accept: svc.GroupCommit().EventAccept,
		Kinds:           policies,
		MaxPayloadBytes: 1 << 16,
		AdminToken:      adminToken,
		Logger:          logger,
	}))
	t.Cleanup(srv.Close)
	s.url = srv.URL
	cli := converge.AuditEntry{Actor: "test", Role: "operator"}
	if s.viewer, _, err = s.store.TokenCreate(t.Context(), "viewer-1", converge.RoleViewer, cli); err != nil {
		t.Fatal(err)
	}
	if s.operator, _, err = s.store.TokenCreate(t.Context(), "operator-1", converge.RoleOperator, cli); err != nil {
		t.Fatal(err)
	}
	return s
}

// response is an HTTP answer with its body read.
type response struct {
	status int
	header http.Header
	body   []byte
}

// decode unmarshals the body into v.
func (r *response) decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("decode %s: %v", r.body, err)
	}
}

// problem is an RFC 9457 body.
type problem struct {
	Type   string                `json:"type"`
	Title  string                `json:"title"`
	Status int                   `json:"status"`
	Detail string                `json:"detail"`
	Errors []converge.FieldError `json:"errors"`
}

// do sends method path with token (adminToken when empty) and, unless body
// is nil, a JSON body (a string or []byte is sent as it is).
func (s *stack) do(t *testing.T, token, method, path string, body any) *response {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = bytes.NewReader([]byte(b))
	case []byte:
		rd = bytes.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(context.WithoutCancel(t.Context()), method, s.url+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if token == "" {
		token = adminToken
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return &response{status: resp.StatusCode, header: resp.Header, body: data}
}

// want fails the test unless r has status.
func want(t *testing.T, r *response, status int) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d: %s", r.status, status, r.body)
	}
}

// wantProblem fails the test unless r is a problem with status and slug.
func wantProblem(t *testing.T, r *response, status int, slug string) problem {
	t.Helper()
	want(t, r, status)
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q, want application/problem+json", ct)
	}
	var p problem
	r.decode(t, &p)
	if p.Type != "urn:converge:problem:"+slug || p.Status != status || p.Title == "" || p.Detail == "" {
		t.Fatalf("problem %+v, want type %s and status %d", p, slug, status)
	}
	return p
}

// accept submits an event through the store.
func (s *stack) accept(t *testing.T, kind, resource string, version int64, maxAttempts int) *converge.EventAcceptResult {
	t.Helper()
	res, err := s.store.EventAccept(context.WithoutCancel(t.Context()), store.EventAcceptParams{
		EventSubmission: converge.EventSubmission{Kind: kind, Resource: resource, Version: version,
			Payload: json.RawMessage(fmt.Sprintf(`{"resource": %q, "version": %d}`, resource, version))},
		MaxAttempts: maxAttempts,
	})
	if err != nil {
		t.Fatalf("accept %s %s@%d: %v", kind, resource, version, err)
	}
	return res
}

// fail makes one attempt of run (which must be runnable and driven by no
// worker) that fails with class and message, through the store's own
// attempt path, and returns the run's status afterwards.
func (s *stack) fail(t *testing.T, runID uuid.UUID, class converge.ErrorClass, message string) converge.RunStatus {
	t.Helper()
	ctx := context.WithoutCancel(t.Context())
	var jobID int64
	if err := s.pool.QueryRow(ctx, `SELECT job_id FROM converge_runs WHERE id = $1`, runID).Scan(&jobID); err != nil {
		t.Fatal(err)
	}
	ticket, err := s.store.AttemptBegin(ctx, runID, jobID, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if ticket.Decision != converge.DecisionCall {
		t.Fatalf("run %s: decision %v, want a call", runID, ticket.Decision)
	}
	fin, err := s.store.AttemptFinish(ctx, store.AttemptFinishParams{
		Run: ticket.Run, JobID: jobID, Attempt: ticket.Attempt, Started: time.Now(),
		Err: &converge.Error{Class: class, Message: message}, Backoff: converge.Backoff{Initial: time.Millisecond, Max: time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	return fin.Status
}

// deadLetter accepts an event and fails its only attempt, so that it is
// dead-lettered with reason permanent_error (class permanent) or
// attempts_exhausted (class transient), and returns the dead letter.
func (s *stack) deadLetter(t *testing.T, kind, resource string, version int64, class converge.ErrorClass, message string) *converge.DeadLetter {
	t.Helper()
	res := s.accept(t, kind, resource, version, 1)
	if st := s.fail(t, res.Run.ID, class, message); st != converge.RunFailed {
		t.Fatalf("run status %s, want failed", st)
	}
	return s.deadLetterOf(t, res.Run.ID)
}

// deadLetterOf returns the dead letter of a run.
func (s *stack) deadLetterOf(t *testing.T, runID uuid.UUID) *converge.DeadLetter {
	t.Helper()
	var id uuid.UUID
	if err := s.pool.QueryRow(context.WithoutCancel(t.Context()), `SELECT id FROM converge_dead_letters WHERE run_id = $1`, runID).Scan(&id); err != nil {
		t.Fatalf("dead letter of run %s: %v", runID, err)
	}
	d, err := s.store.DeadLetterGet(context.WithoutCancel(t.Context()), id)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// count runs a SELECT count(*) ... and returns the number.
func (s *stack) count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := s.pool.QueryRow(context.WithoutCancel(t.Context()), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// call is one call the fake target received.
type call struct {
	Kind     string
	Resource string
	Version  int64
	RunID    uuid.UUID
	Attempt  int
}

// fakeTarget records every call in arrival order and answers with fn (nil:
// success).
type fakeTarget struct {
	mu    sync.Mutex
	calls []call
	fn    func(target.Request) error
}

// Call implements target.Target.
func (f *fakeTarget) Call(ctx context.Context, req target.Request) (target.Result, error) {
	f.mu.Lock()
	f.calls = append(f.calls, call{Kind: req.Kind, Resource: req.Resource, Version: req.Version, RunID: req.RunID, Attempt: req.Attempt})
	fn := f.fn
	f.mu.Unlock()
	if fn != nil {
		if err := fn(req); err != nil {
			return target.Result{}, err
		}
	}
	return target.Result{Output: json.RawMessage(`{"ok": true}`)}, nil
}

func (f *fakeTarget) set(fn func(target.Request) error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fn = fn
}

func (f *fakeTarget) log() []call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]call(nil), f.calls...)
}

// permanent is a target error that is never retried.
func permanent(msg string) error { return converge.Permanent(errors.New(msg)) }
