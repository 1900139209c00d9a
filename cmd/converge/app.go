package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
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
			cfg, err := e.loadConfig(configPath)
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

func (e *env) loadConfig(path string) (*config.Config, error) {
	if path == "" {
		path = e.getenv("CONVERGE_CONFIG")
	}
	cfg, err := config.Load(path, e.getenv)
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
// timeout), the pool.
func serve(ctx context.Context, cfg *config.Config, mode appMode, logger *slog.Logger, ready onReady) error {
	// The sources' CEL rules are compiled and type-checked before anything
	// starts: a broken expression stops start-up naming its rule.
	sources, err := source.Compile(cfg.SourceDefs())
	if err != nil {
		return config.Keyed(err)
	}
	// OpenTelemetry tracing when the standard OTEL_ environment asks for
	// it (SPEC §14); off, the no-op tracer costs nothing. The exporter
	// flushes last, after the HTTP server and the workers stopped.
	tracing, err := telemetry.StartTracing(ctx, os.Getenv, version, logger)
	if err != nil {
		return err
	}
	defer func() {
		if err := tracing.Shutdown(context.Background()); err != nil {
			logger.Warn("export the last spans", "error", err)
		}
	}()
	if tracing != nil {
		logger.Info("tracing on: exporting spans with OTLP/HTTP")
	}
	pool, err := openPool(ctx, cfg.DatabaseURL, mode)
	if err != nil {
		return err
	}
	defer pool.Close()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	policies := cfg.KindPolicies()
	kinds, err := buildKinds(cfg, policies)
	if err != nil {
		return err
	}
	metrics := newMetrics(reg, pool, cfg)
	svc, err := jobs.NewService(pool, jobs.Config{
		Kinds: kinds, Work: mode.Worker, RescueAfter: cfg.RescueAfter.Std(),
		FetchCooldown: cfg.River.FetchCooldown.Std(), FetchPollInterval: cfg.River.FetchPollInterval.Std(),
		PollOnly: cfg.River.PollOnly, SoftStopTimeout: cfg.ShutdownTimeout.Std(), Logger: logger, Metrics: metrics,
	})
	if err != nil {
		return err
	}
	st, client := svc.Store(), svc.Client()
	// Workflow runs entering a final status (or failed) in this process's
	// transactions, triggers' changes included.
	st.ObserveWorkflowRuns(metrics.WorkflowRunStatusChanged)

	runCtx, cancelRun := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelRun()
	if err := svc.Start(runCtx); err != nil {
		return err
	}
	// From here on every return stops the jobs service, before the pool
	// closes (deferred above, so run after this); the way out through
	// ctx stops it in order, after the HTTP server's Shutdown.
	stopJobs := sync.OnceFunc(func() {
		if err := svc.Stop(context.Background()); err != nil {
			logger.Warn("shutdown", "error", err)
		}
	})
	defer stopJobs()
	if mode.Worker {
		logger.Info("workers started", "kinds", cfg.KindNames())
	}

	var srv *http.Server
	serveErr := make(chan error, 1)
	{
		hooks := sources.Receiver(source.ReceiverParams{Store: st, Kinds: policies, Workflows: cfg.WorkflowDefs()})
		apiServer := api.New(api.Config{
			Store: st, Accept: svc.GroupCommit().EventAccept, Kinds: policies, Workflows: cfg.WorkflowDefs(),
			Hooks:           hooks.Receive,
			MaxPayloadBytes: cfg.MaxPayloadBytes, AdminToken: cfg.AdminToken,
			OpsOnly: !mode.API, Logger: logger, Registry: reg, Metrics: metrics, RateLimit: cfg.RateLimit.Requests, RateWindow: cfg.RateLimit.Window.Std(),
			SchemaCurrent: func(ctx context.Context) error {
				s, err := migrations.StatusOf(ctx, pool)
				if err != nil {
					return err
				}
				if !s.Current() {
					return errors.New(s.Description)
				}
				return nil
			},
		})
		// The API and the dashboard side by side; the dashboard signs users
		// in with the API's own token check.
		var handler http.Handler = apiServer
		if mode.API {
			dash, err := newDashboard(runCtx, policies, st, client, logger, apiServer.Authenticate, cfg.UI.TraceURL)
			if err != nil {
				return err
			}
			mux := chi.NewRouter()
			mux.Mount("/ui", dash.Handler())
			mux.Mount("/", apiServer)
			handler = mux
		}
		ln, err := net.Listen("tcp", cfg.Listen)
		switch {
		case err != nil && mode.API:
			return &config.KeyError{Key: "listen", Message: err.Error()}
		case err != nil:
			// A worker's endpoints are for probes and scrapes; several
			// workers on one host need their own CONVERGE_LISTEN each.
			logger.Warn("worker serves no /healthz, /readyz or /metrics: cannot listen (set CONVERGE_LISTEN)", "listen", cfg.Listen, "error", err)
			if ready != nil {
				ready("")
			}
		default:
			if tracing != nil {
				handler = traceHTTP(handler)
			}
			srv = newHTTPServer(handler, logger)
			go func() { serveErr <- srv.Serve(ln) }()
			logger.Info("listening", "addr", ln.Addr().String())
			if ready != nil {
				ready(ln.Addr().String())
			}
		}
	}

	var runErr error
	select {
	case <-ctx.Done():
		logger.Info("shutting down")
	case err := <-serveErr:
		runErr = fmt.Errorf("http server: %w", err)
	}
	if srv != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = srv.Shutdown(sctx)
		cancel()
	}
	stopJobs()
	cancelRun()
	logger.Info("stopped")
	return runErr
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
// body by api.LimitHeaders, before any handler (the dashboard's too).
func newHTTPServer(handler http.Handler, logger *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           api.RequestID(api.LimitHeaders(handler)),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       60 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    api.ServerMaxHeaderBytes, // api.LimitHeaders answers 431 at api.MaxHeaderBytes
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
}

func openPool(ctx context.Context, databaseURL string, mode appMode) (*pgxpool.Pool, error) {
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
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("connect to database: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to database: %s", redactErr(err))
	}
	return pool, nil
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
	for name, k := range cfg.Kinds {
		var t target.Target
		var err error
		switch {
		case k.Target.HTTP != nil:
			h := k.Target.HTTP
			t, err = target.NewHTTP(target.HTTPConfig{URL: h.URL, Timeout: h.Timeout.Std(), Headers: h.Headers,
				TransientStatuses: h.TransientStatuses, PermanentStatuses: h.PermanentStatuses})
		default:
			x := k.Target.Exec
			t, err = target.NewExec(target.ExecConfig{Command: x.Command, Timeout: x.Timeout.Std(),
				PermanentExitCodes: x.PermanentExitCodes, Dir: x.Dir})
		}
		if err != nil {
			return nil, &config.KeyError{Key: "kinds." + name + ".target", Message: err.Error()}
		}
		kinds[name] = &jobs.Kind{KindPolicy: policies[name], Target: t}
	}
	return kinds, nil
}

// newDashboard builds the dashboard (mounted at /ui) and starts River UI's
// background services until ctx ends.
func newDashboard(ctx context.Context, policies converge.KindPolicies, st *store.Store, client *river.Client[pgx.Tx], logger *slog.Logger,
	authenticate func(context.Context, string) (*converge.Actor, error), traceURL string) (*ui.UI, error) {
	dash, err := ui.New(ui.Config{Store: st, Authenticate: authenticate, Kinds: policies, River: client,
		Logger: logger.With("component", "ui"), TraceURL: traceURL})
	if err != nil {
		return nil, err
	}
	if err := dash.Start(ctx); err != nil {
		return nil, err
	}
	return dash, nil
}
