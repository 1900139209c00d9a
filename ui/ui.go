package ui

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/api"
	"github.com/converge-run/converge/store"
)

// DefaultSessionTTL is how long a dashboard session lasts.
const DefaultSessionTTL = 12 * time.Hour

// Config sets up the dashboard.
type Config struct {
	Store *store.Store
	// Authenticate resolves a token typed on the sign-in page to an actor,
	// as the API does for a bearer token (api.Server.Authenticate).
	Authenticate func(ctx context.Context, token string) (*converge.Actor, error)
	// Kinds are the configured kinds: a run a redrive starts gets its
	// kind's MaxAttempts (as the API does), and the filters offer their
	// names.
	Kinds converge.KindPolicies
	// River, when set, is served as River UI at /ui/river to operators.
	River *river.Client[pgx.Tx]
	// Sources are the configured event sources' names (the deliveries
	// filter offers them); Explain evaluates a source's rules on a stored
	// delivery's body and headers without writing anything (the delivery
	// page shows what each rule would start).
	Sources []string
	Explain func(source string, body json.RawMessage, headers map[string]string) (*converge.SourceTest, error)
	// SessionTTL is how long a session lasts; DefaultSessionTTL when zero.
	SessionTTL time.Duration
	Logger     *slog.Logger
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// TraceURL (ui.trace_url) makes a run's trace id a link to a trace
	// viewer: a URL template with {trace_id}, such as
	// http://127.0.0.1:16686/trace/{trace_id}. Empty shows the id alone.
	TraceURL string
}

// UI is the dashboard.
type UI struct {
	cfg   Config
	store *store.Store
	log   *slog.Logger
	pages map[string]*page
	cop   *http.CrossOriginProtection
	river *riverUI
	kinds []string
}

// New parses the templates and builds the dashboard. It fails only when
// the embedded templates are broken or River UI cannot be set up.
func New(cfg Config) (*UI, error) {
	if cfg.Store == nil || cfg.Authenticate == nil {
		return nil, fmt.Errorf("ui: Store and Authenticate are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = DefaultSessionTTL
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	u := &UI{cfg: cfg, store: cfg.Store, log: cfg.Logger, pages: pages, cop: http.NewCrossOriginProtection()}
	u.kinds = cfg.Kinds.Names()
	u.cop.SetDenyHandler(http.HandlerFunc(u.handleCrossOrigin))
	if cfg.River != nil {
		u.river, err = newRiverUI(cfg.River, cfg.Logger)
		if err != nil {
			return nil, err
		}
	}
	return u, nil
}

// Start starts River UI's background services until ctx ends. Without a
// River client it does nothing.
func (u *UI) Start(ctx context.Context) error {
	if u.river == nil {
		return nil
	}
	return u.river.start(ctx)
}

// Handler returns the dashboard, to be mounted at /ui beside the API (cmd
// does). Each request gets an id as the API's do (api.RequestID), every GET
// route answers HEAD (SPEC §4), and a method its route does not allow gets
// a 405 page (River UI's calls the API's problem), its Allow header the
// methods the dashboard's own route serves.
func (u *UI) Handler() http.Handler {
	r := chi.NewRouter()
	r.Use(api.RequestID, middleware.Recoverer, headAsGet(r))
	problem := api.MethodNotAllowedOn(r)
	r.MethodNotAllowed(u.loadSession(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if rctx := chi.RouteContext(req.Context()); rctx != nil && strings.HasPrefix(rctx.RoutePath, "/river/") {
			// River UI's own calls (its retry, cancel and delete of
			// jobs) read the API's problem, which its page shows.
			problem(w, req)
			return
		}
		if allow := api.AllowOn(r, req); allow != "" {
			w.Header().Set("Allow", allow)
		}
		u.errorPage(w, req, http.StatusMethodNotAllowed, "Method not allowed",
			req.Method+" is not how this page is reached: follow a link or a button of the dashboard.")
	})).ServeHTTP)
	u.routes(r)
	return r
}

// headAsGet routes a HEAD request that no HEAD route of routes takes as a
// GET (net/http sends no body for HEAD). It is chi's middleware.GetHead,
// but it asks routes, the dashboard's own router, rather than the router in
// the routing context, which is the router /ui is mounted in and does not
// know the dashboard's paths.
func headAsGet(routes chi.Routes) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodHead {
				if rctx := chi.RouteContext(r.Context()); rctx != nil {
					path := rctx.RoutePath
					if path == "" {
						path = r.URL.RawPath
						if path == "" {
							path = r.URL.Path
						}
					}
					if !routes.Match(chi.NewRouteContext(), http.MethodHead, path) {
						rctx.RouteMethod = http.MethodGet
						rctx.RoutePath = path
					}
				}
			}
			next.ServeHTTP(w, r)
		})
	}
}

// routes registers the dashboard's routes and middleware on r, which is
// mounted at /ui.
func (u *UI) routes(r chi.Router) {
	r.Use(u.cop.Handler, securityHeaders)
	r.Get("/static/*", u.handleStatic)
	// The page of an unknown path knows who is signed in, so that its
	// header shows them (and Sign out), not a sign-in link.
	r.NotFound(u.loadSession(http.HandlerFunc(u.handleNotFound)).ServeHTTP)
	r.Group(func(r chi.Router) {
		r.Use(api.PathParams, u.loadSession)
		r.Get("/sign-in", u.handleSignInShow)
		r.Post("/sign-in", u.handleSignInSubmit)
		r.Group(func(r chi.Router) {
			r.Use(u.requireSession)
			r.Get("/", u.handleOverview)
			r.With(u.requireFormToken).Post("/sign-out", u.handleSignOut)
			r.Get("/dead-letters", u.handleDeadLetterList)
			r.Get("/dead-letters/{id}", u.handleDeadLetterShow)
			r.Get("/streams", u.handleStreamList)
			r.Get("/streams/{kind}/*", u.handleStreamShow)
			r.Get("/events/{id}", u.handleEventShow)
			r.Get("/workflow-runs", u.handleWorkflowRunList)
			r.Get("/workflow-runs/{id}", u.handleWorkflowRunShow)
			r.Get("/deliveries", u.handleDeliveryList)
			r.Get("/deliveries/{id}", u.handleDeliveryShow)
			r.Group(func(r chi.Router) {
				r.Use(u.requireOperator)
				r.Get("/dead-letters/confirm", u.handleDeadLetterBulkConfirm)
				r.Get("/dead-letters/result", u.handleDeadLetterBulkResult)
				if u.river != nil {
					r.Handle("/river", http.RedirectHandler(riverPrefix+"/", http.StatusSeeOther))
					// Read-only: River UI's writes (retry, cancel, delete
					// a job, pause a queue) would bypass converge's fencing
					// and its audit log (SPEC §4); its API's reads are GETs.
					r.Get("/river/*", u.river.ServeHTTP)
				}
				r.Group(func(r chi.Router) {
					r.Use(u.requireFormToken, u.checkReason)
					r.Post("/dead-letters/bulk", u.handleDeadLetterBulkSubmit)
					r.Post("/dead-letters/{id}/redrive", u.handleDeadLetterRedrive)
					r.Post("/dead-letters/{id}/discard", u.handleDeadLetterDiscard)
					r.Post("/runs/{id}/cancel", u.handleRunCancel)
					r.Post("/runs/{id}/approve", u.handleRunApprove)
					r.Post("/runs/{id}/reject", u.handleRunReject)
					r.Post("/quarantine/{kind}/*", u.handleQuarantineRelease)
					r.Post("/workflow-runs/{id}/cancel", u.handleWorkflowRunCancel)
				})
			})
		})
	})
}
