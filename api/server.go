package api

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/store"
	"github.com/converge-run/converge/telemetry"
)

// Config sets up the HTTP server.
type Config struct {
	Store *store.Store
	// Accept, when set, accepts events in place of Store.EventAccept: cmd
	// passes the group commit of jobs.Service, so that concurrent requests
	// are committed together.
	Accept func(context.Context, store.EventAcceptParams) (*converge.EventAcceptResult, error)
	// Kinds are the configured kinds: an event of another kind is
	// refused; a new run gets its kind's MaxAttempts and Debounce, and a
	// redriven run its kind's MaxAttempts.
	Kinds converge.KindPolicies
	// Hooks, when set, receives the deliveries of event sources posted
	// to /hooks/{source} (cmd passes source.Receiver.Receive): it checks
	// the signature, evaluates the rules and records the delivery.
	Hooks func(ctx context.Context, source string, header http.Header, body []byte) (*converge.DeliveryResult, error)
	// HookSources, when set, are the names of the configured sources: a
	// delivery to another name is answered 404 without counting against
	// the rate limit, so that made-up names cannot fill its table.
	HookSources []string
	// Workflows are the configured workflows by name.
	Workflows       map[string]*converge.Workflow
	MaxPayloadBytes int64
	// AdminToken, when set, is an operator token named admin.
	AdminToken string
	Logger     *slog.Logger
	// Registry is what GET /metrics serves.
	Registry *prometheus.Registry
	// Metrics, if set, counts accepted and rejected event submissions
	// and superseded runs (see telemetry.NewMetrics; registered in
	// Registry by the caller).
	Metrics *telemetry.Metrics
	// SchemaCurrent reports whether the schema is fully migrated (readyz).
	SchemaCurrent func(context.Context) error
	// RateLimit is requests per RateWindow per token; 0 is off.
	RateLimit  int
	RateWindow time.Duration
	// OpsOnly serves only /healthz, /readyz, /metrics and /openapi.json:
	// what a worker process exposes.
	OpsOnly bool
}

// Server answers converge's HTTP API.
type Server struct {
	cfg    Config
	store  *store.Store
	logger *slog.Logger
	router chi.Router
	roles  map[string]converge.Role
	// limiter is the per-actor rate limiter; nil when off.
	limiter *rateLimiter
}

// New builds the server and its routes.
func New(cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	if cfg.Accept == nil {
		cfg.Accept = cfg.Store.EventAccept
	}
	s := &Server{cfg: cfg, store: cfg.Store, logger: cfg.Logger, roles: map[string]converge.Role{}, limiter: newRateLimiter(cfg)}
	s.router = s.routes()
	return s
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.router.ServeHTTP(w, r) }

func (s *Server) routes() chi.Router {
	r := chi.NewRouter()
	r.Use(RequestID, LimitHeadersCounted(s.cfg.Metrics), middleware.Recoverer, s.countEventRejections, middleware.GetHead, staticRoutes)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, r, converge.Errorf(converge.ENOTFOUND, "no route for %s %s", r.Method, r.URL.Path))
	})
	r.MethodNotAllowed(MethodNotAllowed)
	r.Get("/healthz", s.handleHealthz)
	r.Get("/readyz", s.handleReadyz)
	r.Method(http.MethodGet, "/metrics", promhttp.HandlerFor(s.cfg.Registry, promhttp.HandlerOpts{}))
	r.Get("/openapi.json", s.handleOpenAPI)
	if s.cfg.OpsOnly {
		return r
	}
	// Hooks are authenticated by their signature, not by a token.
	r.With(PathParams, s.hookRateLimit).Post("/hooks/{source}", s.handleHook)
	// Authentication is each route's own middleware, not the /v1
	// router's: a path no route takes (404) or a method its route does
	// not serve (405, with Allow) is answered before it, to a client with
	// a token or without (the route table is the public /openapi.json).
	r.Route("/v1", func(r chi.Router) {
		s.route(r, http.MethodPost, "/events", converge.RoleSubmitter, s.handleEventCreate)
		s.route(r, http.MethodGet, "/events", converge.RoleSubmitter, s.handleEventList)
		s.route(r, http.MethodGet, "/events/{id}", converge.RoleSubmitter, s.handleEventGet)
		s.route(r, http.MethodPost, "/runs/{id}/cancel", converge.RoleOperator, s.handleRunCancel)
		s.route(r, http.MethodPost, "/runs/{id}/approve", converge.RoleOperator, s.handleRunApprove)
		s.route(r, http.MethodPost, "/runs/{id}/reject", converge.RoleOperator, s.handleRunReject)
		s.route(r, http.MethodGet, "/quarantine", converge.RoleViewer, s.handleQuarantineList)
		s.route(r, http.MethodPost, "/quarantine/{kind}/*", converge.RoleOperator, s.handleQuarantineRelease)
		s.route(r, http.MethodPost, "/workflow-runs", converge.RoleSubmitter, s.handleWorkflowRunCreate)
		s.route(r, http.MethodGet, "/workflow-runs", converge.RoleSubmitter, s.handleWorkflowRunList)
		s.route(r, http.MethodGet, "/workflow-runs/{id}", converge.RoleSubmitter, s.handleWorkflowRunGet)
		s.route(r, http.MethodPost, "/workflow-runs/{id}/cancel", converge.RoleOperator, s.handleWorkflowRunCancel)
		s.route(r, http.MethodGet, "/resources/{kind}/*", converge.RoleSubmitter, s.handleResourceGet)
		s.route(r, http.MethodGet, "/audit", converge.RoleViewer, s.handleAuditList)
		s.route(r, http.MethodGet, "/deliveries", converge.RoleViewer, s.handleDeliveryList)
		s.route(r, http.MethodGet, "/deliveries/{id}", converge.RoleViewer, s.handleDeliveryGet)
		s.deadLetterRoutes(r)
	})
	return r
}

// route registers a /v1 handler that requires role: its path parameters
// decoded, the request authenticated, rate-limited and its body limited,
// then the actor's role checked, and a query refused unless the route is
// a list.
func (s *Server) route(r chi.Router, method, pattern string, role converge.Role, h http.HandlerFunc) {
	s.roles[method+" /v1"+pattern] = role
	mw := chi.Middlewares{PathParams}
	if end, ok := wildcardEnding["/v1"+pattern]; ok {
		mw = append(mw, pathEnding(end.suffix, end.detail))
	}
	mw = append(mw, s.authenticate, s.rateLimit, s.limitBody, requireRole(role))
	if method != http.MethodGet || isParameterRoute(pattern) {
		// Only the lists take a query (each checks its own); any other
		// route refuses one rather than ignore it: a POST
		// /v1/dead-letters/purge?dry_run=true must not purge.
		mw = append(mw, s.noQuery)
	}
	r.With(mw...).Method(method, pattern, h)
}

// noQuery answers 422 invalid-request to a request with a query string,
// naming its first parameter.
func (s *Server) noQuery(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.RawQuery != "" {
			if err := queryParams(r); err != nil {
				s.writeError(w, r, err)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

func requestID(r *http.Request) string { return middleware.GetReqID(r.Context()) }
