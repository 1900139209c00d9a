package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/riverqueue/river"
	"github.com/spf13/cobra"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/api"
	"github.com/converge-run/converge/config"
	"github.com/converge-run/converge/jobs"
	"github.com/converge-run/converge/migrations"
	"github.com/converge-run/converge/source"
	"github.com/converge-run/converge/store"
	"github.com/converge-run/converge/target"
	"github.com/converge-run/converge/telemetry"
	"github.com/converge-run/converge/ui"
)

func (e *env) serveCommand(name, short string, withAPI, withWorker bool) *cobra.Command {
	var configPath, logFormat string
	cmd := &cobra.Command{
		Use:   name,
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkLogFormat(logFormat); err != nil {
				return err
			}
			// The API checks the sources' signatures; the workers sign
			// their calls: each process needs only its own secrets.
			cfg, err := e.loadServeConfig(configPath, config.Secrets{Sources: withAPI, Calls: withWorker})
			if err != nil {
				return err
			}
			logger := newLogger(e.stderr, cfg.LogLevel, logFormat)
			return serve(cmd.Context(), cfg, appMode{API: withAPI, Worker: withWorker}, logger, nil)
		},
	}
	cmd.Flags().StringVar(&configPath, "config", "", "configuration file (default $CONVERGE_CONFIG)")
	cmd.Flags().StringVar(&logFormat, "log-format", "json", "log format on standard error: json (one object a line, with event_id, run_id and trace_id where they apply) or text")
	return cmd
}

// checkLogFormat refuses a --log-format other than json and text (a usage
// error).
func checkLogFormat(format string) error {
	if format != "json" && format != "text" {
		return &usageError{fmt.Errorf("--log-format: must be json or text, not %q", format)}
	}
	return nil
}

// loadServeConfig loads the configuration of a command that serves
// (serve, api, worker): every secret of need it names must be set.
func (e *env) loadServeConfig(path string, need config.Secrets) (*config.Config, error) {
	return e.loadConfigWith(path, func(path string, getenv func(string) string) (*config.Config, error) {
		return config.LoadSecrets(path, getenv, need)
	})
}

// loadAdminConfig loads the configuration of a command that only reads
// and writes the database (migrate, token, prune): the secrets of sources,
// targets and notifications need not be set, so that a migration job
// needs only the database.
func (e *env) loadAdminConfig(path string) (*config.Config, error) {
	return e.loadConfigWith(path, config.LoadWithoutSecrets)
}

func (e *env) loadConfigWith(path string, load func(string, func(string) string) (*config.Config, error)) (*config.Config, error) {
	if path == "" {
		path = e.getenv("CONVERGE_CONFIG")
	}
	cfg, err := load(path, e.getenv)
	if err != nil {
		return nil, err
	}
	if cfg.DatabaseURL == "" {
		return nil, &config.KeyError{Key: "database_url", Message: "is required (set DATABASE_URL or database_url in the config file)"}
	}
	return cfg, nil
}

// newLogger returns the process's logger at level, writing JSON lines (or
// slog's text format when format is "text") to w.
func newLogger(w io.Writer, level, format string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level))
	if format == "text" {
		return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l}))
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l}))
}

// appMode says which parts a process runs.
type appMode struct {
	API    bool
	Worker bool
}

// onReady is called with the HTTP address once the process serves.
type onReady func(addr string)

// serve runs the configured parts until ctx ends, then shuts down in
// reverse: HTTP, River (letting attempts in flight finish for the shutdown
// timeout), the pool. Each step is a function of its own; every step that
// starts something defers its stop here, so that any return stops what
// started, in reverse order.
func serve(ctx context.Context, cfg *config.Config, mode appMode, logger *slog.Logger, ready onReady) error {
	// The sources' CEL rules are compiled and type-checked before anything
	// starts: a broken expression stops start-up naming its rule.
	sources, err := source.Compile(cfg.SourceDefs())
	if err != nil {
		return config.Keyed(err)
	}
	tracing, err := startTracing(ctx, logger)
	if err != nil {
		return err
	}
	defer stopTracing(tracing, logger)
	// The targets and receivers (their signing secrets) too, before the
	// database is reached.
	policies := cfg.KindPolicies()
	kinds, err := buildKinds(cfg, policies)
	if err != nil {
		return err
	}
	notify, err := buildNotify(cfg)
	if err != nil {
		return err
	}
	pools, err := openServePools(ctx, cfg, mode)
	if err != nil {
		return err
	}
	defer pools.Close()
	reg := newRegistry()
	metrics := newMetrics(reg, pools.main, cfg)
	svc, err := newJobsService(cfg, mode, pools, kinds, notify, logger, metrics)
	if err != nil {
		return err
	}
	runCtx, cancelRun := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelRun()
	// From here on every return stops the jobs service, before the pool
	// closes (deferred above, so run after this); the way out through
	// ctx stops it in order, after the HTTP server's Shutdown.
	workers := startWorkers(runCtx, cfg, mode, pools.main, svc, logger)
	defer workers.stop()
	srv, serveErr, err := startHTTP(runCtx, httpParams{cfg: cfg, mode: mode, logger: logger, ready: ready,
		sources: sources, policies: policies, pool: pools.main, svc: svc, reg: reg, metrics: metrics, traced: tracing != nil})
	if err != nil {
		return err
	}
	if !mode.Worker {
		go warnUnavailable(runCtx, pools.main, logger)
	}
	workers.retry(runCtx)
	runErr := waitForStop(ctx, serveErr, logger)
	shutdownHTTP(srv)
	// The workers may still be starting: stop trying, then stop them.
	cancelRun()
	workers.wait()
	workers.stop()
	logger.Info("stopped")
	return runErr
}

// startTracing turns OpenTelemetry tracing on when the standard OTEL_
// environment asks for it (SPEC §14); off, it returns nil and the no-op
// tracer costs nothing. The exporter flushes last (stopTracing), after
// the HTTP server and the workers stopped.
func startTracing(ctx context.Context, logger *slog.Logger) (*telemetry.Tracing, error) {
	tracing, err := telemetry.StartTracing(ctx, os.Getenv, version, logger)
	if err != nil {
		return nil, err
	}
	if tracing != nil {
		logger.Info("tracing on: exporting spans with OTLP", "protocol", tracing.Protocol())
	}
	return tracing, nil
}

// stopTracing exports the spans tracing still holds (nil: nothing to do).
func stopTracing(tracing *telemetry.Tracing, logger *slog.Logger) {
	if err := tracing.Shutdown(context.Background()); err != nil {
		logger.Warn("export the last spans", "error", err)
	}
}

// servePools are the pools of a serving process: main for everything,
// listen (or nil) for River's LISTEN when main goes through a pooler in
// transaction mode, and whether River must poll instead.
type servePools struct {
	main     *pgxpool.Pool
	listen   *pgxpool.Pool
	pollOnly bool
}

// openServePools opens the pools of cfg without connecting (newPool).
// Behind a pooler in transaction mode River cannot LISTEN: a worker polls,
// or listens over database.direct_url when one is given.
func openServePools(ctx context.Context, cfg *config.Config, mode appMode) (*servePools, error) {
	pool, err := newPool(ctx, cfg, cfg.DatabaseURL, mode)
	if err != nil {
		return nil, err
	}
	p := &servePools{main: pool, pollOnly: cfg.River.PollOnly}
	if cfg.Database.Transaction() && mode.Worker && !p.pollOnly {
		if cfg.Database.DirectURL == "" {
			p.pollOnly = true
		} else if p.listen, err = newPool(ctx, cfg, cfg.Database.DirectURL, appMode{}); err != nil {
			pool.Close()
			return nil, err
		}
	}
	return p, nil
}

// Close closes the pools, the listening one first.
func (p *servePools) Close() {
	if p.listen != nil {
		p.listen.Close()
	}
	p.main.Close()
}

// newRegistry is the process's Prometheus registry, with the Go runtime's
// and the process's collectors; newMetrics adds converge's.
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// newJobsService builds the jobs service (River, the store, the workers
// of kinds when mode runs them, the notifications to notify) without
// starting it, and has the store count the workflow runs entering a final
// status (or failed) in this process's transactions, triggers' changes
// included, the workflow steps its finishes accept and the runs its
// accepts supersede.
func newJobsService(cfg *config.Config, mode appMode, pools *servePools, kinds map[string]*jobs.Kind,
	notify []jobs.NotifyReceiver, logger *slog.Logger, metrics *telemetry.Metrics) (*jobs.Service, error) {
	svc, err := jobs.NewService(pools.main, jobs.Config{
		Notify: notify, DashboardURL: cfg.DashboardURL(),
		Kinds: kinds, Work: mode.Worker, RescueAfter: cfg.RescueAfter.Std(),
		FetchCooldown: cfg.River.FetchCooldown.Std(), FetchPollInterval: cfg.River.FetchPollInterval.Std(),
		PollOnly: pools.pollOnly, SoftStopTimeout: cfg.ShutdownTimeout.Std(), Logger: logger, Metrics: metrics,
		ListenPool: pools.listen, StoreOptions: storeOptions(cfg),
		Retention: cfg.Retention.Policy(),
	})
	if err != nil {
		return nil, err
	}
	svc.Store().ObserveWorkflowRuns(metrics.WorkflowRunStatusChanged)
	// The steps a finish accepts and the runs any accept supersedes are
	// done inside the store's transactions: it tells them after commit.
	svc.Store().ObserveAccepts(store.AcceptObserver{StepAccepted: metrics.WorkflowStepAccepted, RunsSuperseded: metrics.RunsSuperseded})
	return svc, nil
}

// servedWorkers is the jobs service of a serving process and how far its
// start got.
type servedWorkers struct {
	svc    *jobs.Service
	pool   *pgxpool.Pool
	cfg    *config.Config
	logger *slog.Logger
	// startErr is the first try's error, nil when the service started.
	startErr error
	// started receives once: nil when the service started, or why it
	// never did.
	started chan error
	// stop stops the service, once however often it is called.
	stop func()
}

// startWorkers starts svc now when the database answers (pingThenStart);
// otherwise the process serves (/healthz 200, /readyz 503) and retry
// starts it once the database does, rather than exit.
func startWorkers(ctx context.Context, cfg *config.Config, mode appMode, pool *pgxpool.Pool, svc *jobs.Service, logger *slog.Logger) *servedWorkers {
	w := &servedWorkers{svc: svc, pool: pool, cfg: cfg, logger: logger, started: make(chan error, 1)}
	w.startErr = pingThenStart(ctx, pool, svc, mode)
	if w.startErr == nil {
		w.started <- nil
	}
	w.stop = sync.OnceFunc(func() {
		if err := svc.Stop(context.Background()); err != nil {
			logger.Warn("shutdown", "error", err)
		}
	})
	if mode.Worker && w.startErr == nil {
		logger.Info("workers started", "kinds", cfg.KindNames())
	}
	return w
}

// retry keeps trying, in the background until ctx ends, to start the
// service whose first start failed (startJobs); a started one needs
// nothing.
func (w *servedWorkers) retry(ctx context.Context) {
	if w.startErr == nil {
		return
	}
	go func() {
		err := startJobs(ctx, w.pool, w.svc, w.logger, w.startErr)
		if err == nil {
			w.logger.Info("workers started", "kinds", w.cfg.KindNames())
		}
		w.started <- err
	}()
}

// wait waits until the service started or its retries gave up (their
// context ended).
func (w *servedWorkers) wait() {
	if err := <-w.started; err != nil {
		w.logger.Info("workers never started: the process stopped first", "error", err)
	}
}

// warnUnavailable says once, when the database does not answer within
// startRetryMax, that it cannot be used yet: in a process without
// workers nothing retries at start (/readyz says so until it answers).
func warnUnavailable(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger) {
	pctx, cancel := context.WithTimeout(ctx, startRetryMax)
	defer cancel()
	if err := pool.Ping(pctx); err != nil && ctx.Err() == nil {
		logger.Warn("database unavailable; serving, /readyz answers 503 until it answers", "error", redactErr(err))
	}
}

// httpParams is what startHTTP serves.
type httpParams struct {
	cfg      *config.Config
	mode     appMode
	logger   *slog.Logger
	ready    onReady
	sources  *source.Set
	policies converge.KindPolicies
	pool     *pgxpool.Pool
	svc      *jobs.Service
	reg      *prometheus.Registry
	metrics  *telemetry.Metrics
	// traced wraps the handler in traceHTTP.
	traced bool
}

// startHTTP listens on cfg.Listen and serves the handler of p (newHandler)
// in the background; the channel receives why serving stopped. A worker
// that cannot listen serves nothing (nil server) and says so; the API
// that cannot listen stops start-up naming the key. ready is called with
// the address served, or "" for a worker without one.
func startHTTP(ctx context.Context, p httpParams) (*http.Server, <-chan error, error) {
	serveErr := make(chan error, 1)
	handler, err := newHandler(ctx, p)
	if err != nil {
		return nil, nil, err
	}
	ln, err := net.Listen("tcp", p.cfg.Listen)
	switch {
	case err != nil && p.mode.API:
		return nil, nil, &config.KeyError{Key: "listen", Message: err.Error()}
	case err != nil:
		// A worker's endpoints are for probes and scrapes; several
		// workers on one host need their own CONVERGE_LISTEN each.
		p.logger.Warn("worker serves no /healthz, /readyz or /metrics: cannot listen (set CONVERGE_LISTEN)", "listen", p.cfg.Listen, "error", err)
		if p.ready != nil {
			p.ready("")
		}
		return nil, serveErr, nil
	}
	if p.traced {
		handler = traceHTTP(handler)
	}
	srv := newHTTPServer(api.RequestTimeout(p.cfg.RequestTimeout.Std(), handler), p.logger, p.metrics)
	go func() { serveErr <- serveHTTP(srv, ln) }()
	p.logger.Info("listening", "addr", ln.Addr().String())
	if p.ready != nil {
		p.ready(ln.Addr().String())
	}
	return srv, serveErr, nil
}

// newHandler is the process's HTTP handler: the API (only its ops
// endpoints without mode.API) and, with mode.API, the dashboard beside
// it, which signs users in with the API's own token check and runs River
// UI's background services until ctx ends.
func newHandler(ctx context.Context, p httpParams) (http.Handler, error) {
	cfg, st := p.cfg, p.svc.Store()
	// The API checks the bearer tokens of sources authenticated by a
	// token; it is built after the receiver it is handed.
	var apiServer *api.Server
	hooks := p.sources.Receiver(source.ReceiverParams{Store: st, Kinds: p.policies, Workflows: cfg.WorkflowDefs(), MaxPayloadBytes: cfg.MaxPayloadBytes, Answer: api.DeliveryAnswerJSON,
		Authenticate: func(ctx context.Context, token string) (*converge.Actor, error) {
			return apiServer.Authenticate(ctx, token)
		}})
	apiServer = api.New(api.Config{
		Store: st, Accept: p.svc.GroupCommit().EventAccept, Kinds: p.policies, Workflows: cfg.WorkflowDefs(),
		Hooks: hooks.Receive, HookSources: cfg.SourceNames(),
		MaxPayloadBytes: cfg.MaxPayloadBytes, AdminToken: cfg.AdminToken,
		OpsOnly: !p.mode.API, Logger: p.logger, Registry: p.reg, Metrics: p.metrics, RateLimit: cfg.RateLimit.Requests, RateWindow: cfg.RateLimit.Window.Std(),
		SchemaCurrent: func(ctx context.Context) error {
			s, err := migrations.StatusOf(ctx, p.pool)
			if err != nil {
				return err
			}
			if !s.Current() {
				return fmt.Errorf("%w: %s", api.ErrSchemaNotCurrent, s.Description)
			}
			return nil
		},
	})
	if !p.mode.API {
		return apiServer, nil
	}
	dash, err := newDashboard(ctx, p.policies, st, p.svc.Client(), p.logger, apiServer.Authenticate, cfg.SourceNames(), p.sources, cfg.UI.TraceURL)
	if err != nil {
		return nil, err
	}
	mux := chi.NewRouter()
	mux.Mount("/ui", dash.Handler())
	return sideBySide(apiServer, mux), nil
}

// waitForStop waits until ctx ends (nil: the way out) or the HTTP server
// stops serving (its error).
func waitForStop(ctx context.Context, serveErr <-chan error, logger *slog.Logger) error {
	select {
	case <-ctx.Done():
		logger.Info("shutting down")
		return nil
	case err := <-serveErr:
		return fmt.Errorf("http server: %w", err)
	}
}

// shutdownHTTP stops srv (nil: none) gracefully, giving the requests in
// flight 10s.
func shutdownHTTP(srv *http.Server) {
	if srv == nil {
		return
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	_ = srv.Shutdown(sctx)
	cancel()
}

// newMetrics registers the metrics of SPEC §14 with reg, once per process
// (serve, api, worker and dev alike, so that every process exports the
// same set): the process-local ones, at zero for each configured kind,
// and the collector of the database gauges, read from pool on each scrape.
func newMetrics(reg prometheus.Registerer, pool *pgxpool.Pool, cfg *config.Config) *telemetry.Metrics {
	kinds := cfg.KindNames()
	metrics := telemetry.NewMetrics(reg, telemetry.Labels{
		Kinds:     kinds,
		Workflows: cfg.WorkflowNames(),
		Sources:   cfg.SourceNames(),
	})
	reg.MustRegister(telemetry.NewDatabaseCollector(pool, telemetry.DatabaseCollectorParams{Kinds: kinds}))
	return metrics
}

// traceHTTP wraps the API and the dashboard with otelhttp: a server span
// per request, a child of the traceparent the request sent, under which
// the accept, redrive, workflow start and delivery spans start. Probes and
// scrapes are not traced. A path's ids are folded out of span names.
func traceHTTP(h http.Handler) http.Handler {
	return otelhttp.NewHandler(h, "converge",
		otelhttp.WithFilter(func(r *http.Request) bool {
			switch r.URL.Path {
			case "/healthz", "/readyz", "/metrics":
				return false
			}
			return !strings.HasPrefix(r.URL.Path, "/ui/static/")
		}),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string {
			return r.Method + " " + spanRoute(r.URL.Path)
		}))
}

// spanRoute is path with each segment that is a UUID replaced by {id}, and
// only the first two segments of a resource or hook path kept, so that
// span names stay few.
func spanRoute(path string) string {
	segs := strings.Split(path, "/")
	for i, s := range segs {
		if _, err := uuid.Parse(s); err == nil {
			segs[i] = "{id}"
		}
	}
	if len(segs) > 3 && (segs[1] == "hooks" || segs[1] == "v1" && (segs[2] == "resources" || segs[2] == "quarantine")) {
		segs = append(segs[:3], "…")
	}
	return strings.Join(segs, "/")
}

// newHTTPServer returns the API's HTTP server, with timeouts so that slow or
// idle clients (slowloris) cannot hold connections open: the headers must
// arrive within 10s, the whole request within 60s, the answer be written
// within 60s, and an idle keep-alive connection is closed after 120s.
// Request headers over api.MaxHeaderBytes are answered 431 with a problem
// body by api.LimitHeadersCounted, before any handler (the dashboard's too),
// and a submission's 431 is counted in metrics (nil: not counted).
func newHTTPServer(handler http.Handler, logger *slog.Logger, metrics *telemetry.Metrics) *http.Server {
	return &http.Server{
		Handler:           api.RequestID(api.LimitHeadersCounted(metrics)(handler)),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       60 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    api.ServerMaxHeaderBytes, // api.LimitHeaders answers 431 at api.MaxHeaderBytes
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
}

// serveHTTP serves srv on ln through api.ProblemListener, so that the 431
// net/http answers by itself to headers over srv.MaxHeaderBytes is a
// problem body too.
func serveHTTP(srv *http.Server, ln net.Listener) error { return srv.Serve(api.ProblemListener(ln)) }

// openPool opens the pool of databaseURL for cfg's pooler and timeouts
// (poolConfig) and checks that the database answers: for commands that
// fail when it does not (token, migrate status).
func openPool(ctx context.Context, cfg *config.Config, mode appMode) (*pgxpool.Pool, error) {
	pool, err := newPool(ctx, cfg, cfg.DatabaseURL, mode)
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, &dbUnreachable{fmt.Errorf("connect to database: %s", redactErr(err))}
	}
	return pool, nil
}

// newPool returns the pool of databaseURL without connecting: a process
// that serves starts while the database is unreachable (SPEC §15), and the
// pool connects when it is asked for a connection.
func newPool(ctx context.Context, cfg *config.Config, databaseURL string, mode appMode) (*pgxpool.Pool, error) {
	pc, err := poolConfig(cfg, databaseURL, mode)
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("connect to database: %s", redactErr(err))
	}
	return pool, nil
}

// poolConfig is the pool configuration of databaseURL under cfg.Database:
// with pooler none, statement_timeout and lock_timeout are set on every
// connection (in its start-up message); with pooler transaction nothing
// may stay on a server connection, so queries use the unnamed statement
// with cached descriptions (every parameter, jsonb included, is sent with
// its real type, and no named prepared statement is left behind) and the
// store sets the timeouts per transaction (storeOptions).
func poolConfig(cfg *config.Config, databaseURL string, mode appMode) (*pgxpool.Config, error) {
	pc, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return nil, &config.KeyError{Key: "database_url", Message: "cannot parse: " + redactErr(err)}
	}
	if !strings.Contains(databaseURL, "pool_max_conns") {
		pc.MaxConns = 20
		if mode.Worker {
			pc.MaxConns = 30
		}
	}
	db := cfg.Database
	if m := queryExecMode(databaseURL); m == "exec" || m == "simple_protocol" {
		// These modes send jsonb parameters as bytea or text, which
		// PostgreSQL refuses (every event would be answered 422).
		return nil, &config.KeyError{Key: "database_url", Message: "default_query_exec_mode=" + m +
			" does not encode converge's jsonb parameters; leave it out (behind PgBouncer in transaction mode set database.pooler: transaction)"}
	}
	if db.Transaction() {
		if m := queryExecMode(databaseURL); m != "" && m != "cache_describe" {
			return nil, &config.KeyError{Key: "database_url", Message: "default_query_exec_mode=" + m +
				" cannot be used with database.pooler: transaction (leave it out: converge uses cache_describe)"}
		}
		pc.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
		return pc, nil
	}
	if pc.ConnConfig.RuntimeParams == nil {
		pc.ConnConfig.RuntimeParams = map[string]string{}
	}
	pc.ConnConfig.RuntimeParams["statement_timeout"] = strconv.FormatInt(db.StatementTimeout.Std().Milliseconds(), 10)
	pc.ConnConfig.RuntimeParams["lock_timeout"] = strconv.FormatInt(db.LockTimeout.Std().Milliseconds(), 10)
	return pc, nil
}

// queryExecMode is the default_query_exec_mode databaseURL sets, or "".
func queryExecMode(databaseURL string) string {
	u, err := url.Parse(databaseURL)
	if err != nil {
		return ""
	}
	return u.Query().Get("default_query_exec_mode")
}

// storeOptions are the store's options under cfg.Database: a missing
// table or column is 503 only while the migrations say the schema is not
// current (the check of /readyz), and behind a pooler in transaction mode
// every transaction sets its own timeouts.
func storeOptions(cfg *config.Config) []store.Option {
	return append(timeoutOptions(cfg), store.SchemaCheck(func(ctx context.Context, pool *pgxpool.Pool) (bool, error) {
		s, err := migrations.StatusOf(ctx, pool)
		return s.Current(), err
	}))
}

// timeoutOptions are the store options that bound its statements: none
// when the connection carries the timeouts, the per-transaction ones
// through a transaction pooler.
func timeoutOptions(cfg *config.Config) []store.Option {
	if cfg.Database.Transaction() {
		return []store.Option{store.TransactionTimeouts(cfg.Database.StatementTimeout.Std(), cfg.Database.LockTimeout.Std())}
	}
	return nil
}

// pingThenStart starts svc after checking, within startRetryMax, that the
// database answers (River's own start-up check could wait minutes on an
// address that drops packets). A process without workers starts nothing.
func pingThenStart(ctx context.Context, pool *pgxpool.Pool, svc *jobs.Service, mode appMode) error {
	if !mode.Worker {
		return svc.Start(ctx)
	}
	pctx, cancel := context.WithTimeout(ctx, startRetryMax)
	err := pool.Ping(pctx)
	cancel()
	if err != nil {
		return fmt.Errorf("connect to database: %w", err)
	}
	return svc.Start(ctx)
}

// startRetryMax is the longest pause between two tries to start the
// workers while the database is unavailable (SPEC §15: at most 5 s).
const startRetryMax = 5 * time.Second

// startJobs starts svc, trying again with backoff (250ms doubling, at most
// startRetryMax apart) while it fails (the database unreachable, still
// recovering, or without the schema), until it has started or ctx ends.
// first is the error of a first try already made, or nil to try at once.
func startJobs(ctx context.Context, pool *pgxpool.Pool, svc *jobs.Service, logger *slog.Logger, first error) error {
	delay := 250 * time.Millisecond
	err := first
	for {
		if err == nil {
			if err = pingThenStart(ctx, pool, svc, appMode{Worker: true}); err == nil {
				return nil
			}
		}
		logger.Warn("workers cannot start yet; retrying", "retry_in", delay.String(), "error", redactErr(err))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
		}
		delay = min(2*delay, startRetryMax)
		err = nil
	}
}

// redactErr keeps passwords out of error messages.
func redactErr(err error) string {
	msg := err.Error()
	if i := strings.Index(msg, "://"); i >= 0 {
		if j := strings.Index(msg[i:], "@"); j > 0 {
			msg = msg[:i+3] + "***" + msg[i+j:]
		}
	}
	return msg
}

// buildKinds builds each configured kind's target and pairs it with the
// kind's policy.
func buildKinds(cfg *config.Config, policies converge.KindPolicies) (map[string]*jobs.Kind, error) {
	kinds := map[string]*jobs.Kind{}
	// Exec commands do not inherit the variables converge's secrets are in.
	secretEnv := cfg.SecretEnvNames()
	for name, k := range cfg.Kinds {
		var t target.Target
		var err error
		switch {
		case k.Target.HTTP != nil:
			h := k.Target.HTTP
			var signer *target.Signer
			if secret := h.SigningSecret(); secret != "" {
				if signer, err = target.NewSigner(secret); err != nil {
					return nil, &config.KeyError{Key: "kinds." + name + ".target.http.signing_secret_env",
						Message: fmt.Sprintf("the value of %s is %v", h.SigningSecretEnv, err)}
				}
			}
			t, err = target.NewHTTP(target.HTTPConfig{URL: h.URL, Timeout: h.Timeout.Std(), Headers: h.Headers,
				TransientStatuses: h.TransientStatuses, PermanentStatuses: h.PermanentStatuses, Signer: signer})
		default:
			x := k.Target.Exec
			t, err = target.NewExec(target.ExecConfig{Command: x.Command, Timeout: x.Timeout.Std(),
				PermanentExitCodes: x.PermanentExitCodes, Dir: x.Dir, HiddenEnv: secretEnv})
		}
		if err != nil {
			return nil, &config.KeyError{Key: "kinds." + name + ".target", Message: err.Error()}
		}
		kinds[name] = &jobs.Kind{KindPolicy: policies[name], Target: t}
	}
	return kinds, nil
}

// buildNotify builds the receivers of notifications, with their signers.
func buildNotify(cfg *config.Config) ([]jobs.NotifyReceiver, error) {
	out := make([]jobs.NotifyReceiver, 0, len(cfg.Notifications))
	for i, n := range cfg.Notifications {
		r := jobs.NotifyReceiver{URL: n.URL, Format: n.Format, On: n.On, MaxAttempts: n.MaxAttempts,
			Backoff: n.Backoff.Policy(), Timeout: n.Timeout.Std()}
		if secret := n.Secret(); secret != "" {
			signer, err := target.NewSigner(secret)
			if err != nil {
				return nil, &config.KeyError{Key: fmt.Sprintf("notifications[%d].secret_env", i),
					Message: fmt.Sprintf("the value of %s is %v", n.SecretEnv, err)}
			}
			r.Signer = signer
		}
		out = append(out, r)
	}
	return out, nil
}

// newDashboard builds the dashboard (mounted at /ui) and starts River UI's
// background services until ctx ends.
func newDashboard(ctx context.Context, policies converge.KindPolicies, st *store.Store, client *river.Client[pgx.Tx], logger *slog.Logger,
	authenticate func(context.Context, string) (*converge.Actor, error), sourceNames []string, sources *source.Set, traceURL string) (*ui.UI, error) {
	dash, err := ui.New(ui.Config{Store: st, Authenticate: authenticate, Kinds: policies, River: client,
		Sources: sourceNames, Explain: sources.Explain,
		Logger: logger.With("component", "ui"), TraceURL: traceURL})
	if err != nil {
		return nil, err
	}
	if err := dash.Start(ctx); err != nil {
		return nil, err
	}
	return dash, nil
}
