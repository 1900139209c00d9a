package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/config"
	"github.com/converge-run/converge/demotarget"
	"github.com/converge-run/converge/migrations"
	"github.com/converge-run/converge/pgserver"
	"github.com/converge-run/converge/store"
)

func (e *env) devCommand() *cobra.Command {
	var dataDir, listen, logFormat string
	var opts demotarget.Options
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run everything with no configuration: a private PostgreSQL, the schema, a demo target, the service",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkLogFormat(logFormat); err != nil {
				return err
			}
			if err := checkDemoOptions(opts, "demo-"); err != nil {
				return err
			}
			return e.dev(cmd.Context(), dataDir, listen, logFormat, opts)
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", ".converge-dev", "folder of the private PostgreSQL cluster (kept between runs)")
	cmd.Flags().StringVar(&listen, "listen", "", "address of the API and dashboard (default $CONVERGE_LISTEN or 127.0.0.1:8080)")
	cmd.Flags().StringVar(&logFormat, "log-format", "json", "log format on standard error: json or text")
	cmd.Flags().DurationVar(&opts.Latency, "demo-latency", 300*time.Millisecond, "mean latency of the demo target")
	cmd.Flags().Float64Var(&opts.TransientRate, "demo-transient", 0.15, "share of demo calls that fail transiently")
	cmd.Flags().Float64Var(&opts.PermanentRate, "demo-permanent", 0.03, "share of demo calls that fail permanently")
	return cmd
}

func (e *env) dev(ctx context.Context, dataDir, listen, logFormat string, opts demotarget.Options) error {
	logger := newLogger(e.stderr, "info", logFormat)
	databaseURL := e.getenv("DATABASE_URL")
	if databaseURL == "" {
		abs, err := filepath.Abs(dataDir)
		if err != nil {
			return fmt.Errorf("data dir: %w", err)
		}
		fmt.Fprintf(e.stdout, "starting a private PostgreSQL in %s ...\n", abs)
		srv, err := pgserver.Start(ctx, pgserver.StartOptions{Dir: abs})
		if err != nil {
			return fmt.Errorf("start PostgreSQL (or set DATABASE_URL): %w", err)
		}
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_ = srv.Stop(sctx)
		}()
		if err := ensureDatabase(ctx, srv.URL("postgres"), "converge"); err != nil {
			return err
		}
		databaseURL = srv.URL("converge")
	}
	if err := migrations.Up(ctx, databaseURL); err != nil {
		return err
	}

	demoLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("demo target: %w", err)
	}
	demo := demotarget.New(opts)
	// Beside the demo target, a receiver of notifications that logs them.
	demoMux := http.NewServeMux()
	demoMux.Handle("/", demo)
	demoMux.Handle("POST /notify", devNotifyReceiver(logger))
	go func() { _ = serveUntilDone(ctx, demoLn, demoMux) }()
	demoURL := "http://" + demoLn.Addr().String()

	cfg := config.Default()
	cfg.DatabaseURL = databaseURL
	cfg.Listen = listen
	if cfg.Listen == "" {
		cfg.Listen = e.getenv("CONVERGE_LISTEN")
	}
	cfg.AdminToken = e.getenv("CONVERGE_ADMIN_TOKEN")
	if cfg.AdminToken == "" {
		cfg.AdminToken = store.NewTokenSecret()
	}
	for name, k := range cfg.Kinds {
		k.Target.HTTP.URL = demoURL + "/" + name
		k.MaxAttempts = 5
		k.Backoff = config.Backoff{Initial: config.Duration(500 * time.Millisecond), Max: config.Duration(30 * time.Second)}
	}
	// A build stream whose last three runs failed is quarantined (SPEC §11):
	// its next runs wait for an operator's release.
	cfg.Kinds["build"].QuarantineAfter = 3
	// The tour's pipeline (SPEC §10): build, then staging and a canary,
	// then production once both passed and a person approved it. Parsed
	// from YAML, as a configuration file is, so that its steps are listed
	// in the order written (build, staging, canary, prod), not name order.
	wf, err := config.Parse([]byte(devWorkflows))
	if err != nil {
		return err
	}
	cfg.Workflows = wf.Workflows
	// The demo source: GitHub-style pushes to main, signed with a fixed
	// dev secret (printed below), start the release workflow.
	cfg.Sources = map[string]*config.Source{"demo": {Type: "github", SecretEnv: "CONVERGE_DEV_DEMO_SECRET", Rules: []*config.SourceRule{{
		When:     `headers["x-github-event"] == "push" && body.ref == "refs/heads/main"`,
		Workflow: "release", Resource: "body.repository.full_name", Version: "auto", Payload: `{"sha": body.after}`,
	}}}}
	cfg.SetSourceSecret("demo", devDemoSecret)
	// Every notification goes to the demo receiver, which logs it.
	cfg.Notifications = []*config.Notification{{URL: demoURL + "/notify", On: converge.NotificationTypes,
		MaxAttempts: 3, Backoff: config.Backoff{Initial: config.Duration(time.Second), Max: config.Duration(5 * time.Second)}}}
	cfg.RescueAfter = config.Duration(15 * time.Second)
	cfg.ShutdownTimeout = config.Duration(5 * time.Second)
	if err := cfg.Finish(); err != nil {
		return err
	}
	return serve(ctx, cfg, appMode{API: true, Worker: true}, logger, func(addr string) {
		base := "http://" + addr
		if strings.HasPrefix(addr, "[::]") || strings.HasPrefix(addr, "0.0.0.0") {
			base = "http://127.0.0.1" + addr[strings.LastIndex(addr, ":"):]
		}
		fmt.Fprintf(e.stdout, `
converge is running (Ctrl-C stops everything)
  API:          %s/v1
  dashboard:    %s/ui
  admin token:  %s
  database:     %s (DATABASE_URL for the commands that use it: token, prune, migrate)
  demo target:  %s (kinds: build, deploy)
  workflow:     release (build -> staging + canary -> prod, which waits for an approval)
  demo source:  %s/hooks/demo (type github, secret %s): a push to main starts release
  notifications: dead letters, failed workflow runs, held runs and quarantines are logged here ("notification")

try:
  curl -s -H "Authorization: Bearer %s" -H "Content-Type: application/json" \
    -d '{"kind":"build","resource":"try/web","version":1,"payload":{"ref":"main"}}' %s/v1/events
  curl -s -H "Authorization: Bearer %s" -H "Content-Type: application/json" \
    -d '{"workflow":"release","resource":"try/web","version":2,"payload":{"ref":"main"}}' %s/v1/workflow-runs
  body='{"ref":"refs/heads/main","after":"abc123","repository":{"full_name":"try/web"}}'
  curl -s -H "Content-Type: application/json" -H "X-GitHub-Event: push" -H "X-GitHub-Delivery: $(date +%%s%%N)" \
    -H "X-Hub-Signature-256: sha256=$(printf '%%s' "$body" | openssl dgst -sha256 -hmac %s | sed 's/^.* //')" \
    -d "$body" %s/hooks/demo
`, base, base, cfg.AdminToken, shownDatabaseURL(cfg.DatabaseURL), demoURL, base, devDemoSecret, cfg.AdminToken, base, cfg.AdminToken, base, devDemoSecret, base)
	})
}

// shownDatabaseURL is the database URL as converge dev prints it: with its
// password, if any, replaced by xxxxx (the private PostgreSQL has none).
func shownDatabaseURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(the configured database_url)"
	}
	return u.Redacted()
}

// devNotifyReceiver logs each notification it is posted (converge dev's
// receiver): its type, the dashboard link and the stream.
func devNotifyReceiver(logger *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var n struct {
			Type string `json:"type"`
			Data struct {
				Kind     string `json:"kind"`
				Resource string `json:"resource"`
				Version  int64  `json:"version"`
				URL      string `json:"url"`
			} `json:"data"`
		}
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&n); err != nil {
			http.Error(w, "not a notification", http.StatusBadRequest)
			return
		}
		logger.Info("notification", "type", n.Type, "kind", n.Data.Kind, "resource", n.Data.Resource,
			"version", n.Data.Version, "url", n.Data.URL, "webhook_id", r.Header.Get("webhook-id"))
		w.WriteHeader(http.StatusNoContent)
	})
}

// devDemoSecret is the signing secret of converge dev's demo source: fixed
// and printed, since it guards only a local playground.
const devDemoSecret = "converge-dev-secret"

// devWorkflows is converge dev's release workflow, SPEC §10's.
const devWorkflows = `
workflows:
  release:
    steps:
      build:   {kind: build}
      staging: {kind: deploy, resource: "staging/{resource}", needs: [build]}
      canary:  {kind: deploy, resource: "canary/{resource}",  needs: [build]}
      prod:    {kind: deploy, resource: "prod/{resource}",    needs: [staging, canary], approval: true}
`

// ensureDatabase creates database name unless it exists.
func ensureDatabase(ctx context.Context, adminURL, name string) error {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	var exists bool
	err = conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists)
	_ = conn.Close(ctx)
	if err != nil {
		return fmt.Errorf("look up database %s: %w", name, err)
	}
	if exists {
		return nil
	}
	return pgserver.CreateDatabase(ctx, adminURL, name, "")
}
