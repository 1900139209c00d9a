package ui_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/api"
	"github.com/converge-run/converge/jobs"
	"github.com/converge-run/converge/source"
	"github.com/converge-run/converge/store"
	"github.com/converge-run/converge/target"
	"github.com/converge-run/converge/test/pgtest"
	"github.com/converge-run/converge/test/testkit"
	"github.com/converge-run/converge/ui"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// adminToken is the operator token from the environment in every test
// server.
const adminToken = "test-admin-token-0123456789"

// stack is a whole converge (store, River workers against a fake target,
// the API with the dashboard) on a database of its own.
type stack struct {
	st   *store.Store
	pool *pgxpool.Pool
	srv  *httptest.Server
	// succeed makes the fake target answer 200 from now on.
	succeed *atomic.Bool
	// Tokens by role.
	operator, viewer, submitter string
}

// newStack starts the stack. The fake target fails every build permanently
// (422, or 404 for lib/ resources) and every deploy transiently (503), until
// succeed is set.
func newStack(t *testing.T) *stack {
	t.Helper()
	ctx := t.Context()
	pool := pgtest.OpenPool(t, pgtest.NewDatabase(t), 8)
	s := &stack{succeed: &atomic.Bool{}, pool: pool}

	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Resource string `json:"resource"`
			Version  int64  `json:"version"`
		}
		_ = json.NewDecoder(r.Body).Decode(&body)
		sum := sha256.Sum256([]byte(fmt.Sprintf("%s@%d", body.Resource, body.Version)))
		switch {
		case s.succeed.Load():
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"image":"registry.local/`+body.Resource+`","digest":"sha256:`+hex.EncodeToString(sum[:8])+`"}`)
		case strings.HasSuffix(r.URL.Path, "/deploy"):
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, "upstream connect error or disconnect/reset before headers ("+hex.EncodeToString(sum[:4])+")")
		case strings.HasPrefix(body.Resource, "lib/"):
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, "base image not found: sha256:"+hex.EncodeToString(sum[:16]))
		default:
			w.WriteHeader(http.StatusUnprocessableEntity)
			_, _ = io.WriteString(w, "manifest invalid: field "+hex.EncodeToString(sum[:3])+" is not allowed")
		}
	}))
	t.Cleanup(fake.Close)

	kinds := map[string]*jobs.Kind{}
	maxAttempts := map[string]int{"build": 3, "deploy": 2}
	policies := converge.KindPolicies{}
	for name, n := range maxAttempts {
		tg, err := target.NewHTTP(target.HTTPConfig{URL: fake.URL + "/" + name, Timeout: 5 * time.Second})
		if err != nil {
			t.Fatalf("target: %v", err)
		}
		policies[name] = converge.KindPolicy{Name: name, Timeout: 5 * time.Second, MaxAttempts: n,
			Backoff: converge.Backoff{Initial: time.Millisecond, Max: 5 * time.Millisecond}, Concurrency: 4}
		kinds[name] = &jobs.Kind{KindPolicy: policies[name], Target: tg}
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	svc, err := jobs.NewService(pool, jobs.Config{Kinds: kinds, Work: true, RescueAfter: 10 * time.Second,
		FetchCooldown: 20 * time.Millisecond, FetchPollInterval: 100 * time.Millisecond, Logger: logger})
	if err != nil {
		t.Fatalf("river client: %v", err)
	}
	st, client := svc.Store(), svc.Client()
	s.st = st
	s.seedBeforeWorkers(t, maxAttempts)
	if err := client.Start(context.WithoutCancel(ctx)); err != nil {
		t.Fatalf("start workers: %v", err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = client.Stop(sctx)
		_ = svc.GroupCommit().Drain(sctx)
	})

	sources, err := source.Compile(testSources)
	if err != nil {
		t.Fatalf("sources: %v", err)
	}
	hooks := sources.Receiver(source.ReceiverParams{Store: st, Kinds: policies})
	apiServer := api.New(api.Config{Store: st, Accept: svc.GroupCommit().EventAccept, Kinds: policies, MaxPayloadBytes: 1 << 18, AdminToken: adminToken, Logger: logger,
		Hooks: hooks.Receive})
	dash, err := ui.New(ui.Config{Store: st, Kinds: policies, River: client, Logger: logger, Authenticate: apiServer.Authenticate,
		Sources: []string{"github"}, Explain: sources.Explain})
	if err != nil {
		t.Fatalf("ui: %v", err)
	}
	uiCtx, cancelUI := context.WithCancel(context.Background())
	t.Cleanup(cancelUI)
	if err := dash.Start(uiCtx); err != nil {
		t.Fatalf("start ui: %v", err)
	}
	// Side by side, as cmd mounts them.
	mux := chi.NewRouter()
	mux.Mount("/ui", dash.Handler())
	mux.Mount("/", apiServer)
	s.srv = httptest.NewServer(mux)
	t.Cleanup(s.srv.Close)

	for _, x := range []struct {
		name string
		role converge.Role
		dst  *string
	}{{"oncall", converge.RoleOperator, &s.operator}, {"auditor", converge.RoleViewer, &s.viewer}, {"ci", converge.RoleSubmitter, &s.submitter}} {
		tok, _, err := st.TokenCreate(ctx, x.name, x.role, converge.AuditEntry{Actor: "admin", Role: "operator"})
		if err != nil {
			t.Fatalf("create token: %v", err)
		}
		*x.dst = tok
	}
	return s
}

// seed is an event the stack accepts before its workers start.
type seed struct {
	kind, resource string
	version        int64
}

// seeds make eight dead letters (five builds, failing permanently; three
// deploys, out of attempts) and three supersessions (app/web v1 and v2,
// prod/api v12), all accepted before a worker runs.
var seeds = []seed{
	{"build", "app/web", 1}, {"build", "app/web", 2}, {"build", "app/web", 3},
	{"build", "app/api", 7}, {"build", "app/worker", 3}, {"build", "lib/core", 11}, {"build", "app/billing", 2},
	{"deploy", "prod/web", 40}, {"deploy", "staging/web", 41}, {"deploy", "prod/api", 12}, {"deploy", "prod/api", 13},
}

// wantDeadLetters is how many dead letters the seeds make.
const wantDeadLetters = 8

func (s *stack) seedBeforeWorkers(t *testing.T, maxAttempts map[string]int) {
	t.Helper()
	for _, e := range seeds {
		sum := sha256.Sum256([]byte(e.resource))
		payload := fmt.Sprintf(`{"commit":"%x","image":"registry.local/%s","labels":{"team":"platform","env":"%s"}}`,
			sum[:6], e.resource, strings.SplitN(e.resource, "/", 2)[0])
		_, err := s.st.EventAccept(t.Context(), store.EventAcceptParams{
			EventSubmission: converge.EventSubmission{Kind: e.kind, Resource: e.resource, Version: e.version, Payload: json.RawMessage(payload)},
			MaxAttempts:     maxAttempts[e.kind],
		})
		if err != nil {
			t.Fatalf("accept %v: %v", e, err)
		}
	}
}

// waitDeadLetters waits until n dead letters are open.
func (s *stack) waitDeadLetters(t *testing.T, n int) []*converge.DeadLetter {
	t.Helper()
	var items []*converge.DeadLetter
	testkit.Eventually(t, 60*time.Second, func() (bool, string) {
		var err error
		items, _, err = s.st.DeadLetterList(t.Context(), &converge.DeadLetterListParams{Limit: 100})
		if err != nil {
			t.Fatalf("list dead letters: %v", err)
		}
		return len(items) >= n, fmt.Sprintf("%d open dead letters, want %d", len(items), n)
	})
	return items
}

// deadLetter returns the open dead letter of a stream.
func (s *stack) deadLetter(t *testing.T, kind, resource string) *converge.DeadLetter {
	t.Helper()
	items, _, err := s.st.DeadLetterList(t.Context(), &converge.DeadLetterListParams{
		DeadLetterFilter: converge.DeadLetterFilter{Kind: kind, Resource: resource}, Limit: 100})
	if err != nil {
		t.Fatalf("list dead letters: %v", err)
	}
	for _, d := range items {
		if d.Resource == resource {
			return d
		}
	}
	t.Fatalf("no open dead letter of %s %s", kind, resource)
	return nil
}

// auditActions returns the actions in the audit log, newest first.
func (s *stack) auditActions(t *testing.T) []*converge.AuditEntry {
	t.Helper()
	items, _, err := s.st.AuditList(t.Context(), store.AuditListParams{Limit: 100})
	if err != nil {
		t.Fatalf("audit list: %v", err)
	}
	return items
}
