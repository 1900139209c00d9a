package target

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// readEnvDump parses the output of env(1) in the file at path.
func readEnvDump(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for line := range strings.Lines(string(b)) {
		if k, v, ok := strings.Cut(strings.TrimSuffix(line, "\n"), "="); ok {
			env[k] = v
		}
	}
	return env
}

// TestExecEnvWithoutSecrets: a command does not inherit converge's own
// variables (CONVERGE_*, DATABASE_URL, the PG* ones), the OTLP exporter's
// headers, nor those HiddenEnv names; it inherits the rest, gets the configured Env (even for a hidden
// name), the per-call CONVERGE_* variables and TRACEPARENT. Not parallel:
// it sets the process's environment.
func TestExecEnvWithoutSecrets(t *testing.T) {
	secrets := map[string]string{
		"CONVERGE_ADMIN_TOKEN":  "admin-s3cret",
		"CONVERGE_CONFIG":       "/etc/converge.yaml",
		"CONVERGE_EVENT_ID":     "inherited", // replaced by the call's
		"DATABASE_URL":          "postgres://u:db-s3cret@db/x",
		"DATABASE_DIRECT_URL":   "postgres://u:db-s3cret@db/y",
		"PGPASSWORD":            "pg-s3cret",
		"PGHOST":                "db.internal",
		"PGUSER":                "converge",
		"PGDATABASE":            "converge",
		"PGPASSFILE":            "/secrets/pgpass",
		"PGSERVICE":             "converge",
		"GITHUB_WEBHOOK_SECRET": "gh-s3cret",
		"SLACK_SIGNING":         "slack-s3cret",
		// The OTLP exporter's headers often carry its credentials.
		"OTEL_EXPORTER_OTLP_HEADERS":         "authorization=Bearer otlp-s3cret",
		"OTEL_EXPORTER_OTLP_TRACES_HEADERS":  "x-api-key=traces-s3cret",
		"OTEL_EXPORTER_OTLP_METRICS_HEADERS": "x-api-key=metrics-s3cret",
		"OTEL_EXPORTER_OTLP_LOGS_HEADERS":    "x-api-key=logs-s3cret",
	}
	for k, v := range secrets {
		t.Setenv(k, v)
	}
	kept := map[string]string{
		"DEPLOY_REGION":         "eu-west-1",
		"AWS_SECRET_ACCESS_KEY": "cloud-credential",
		"KUBECONFIG":            "/home/deploy/.kube/config",
		"PG":                    "not libpq",
		"PGx":                   "not libpq",
		"MY_CONVERGE_NOTE":      "not converge's",
		// The rest of OTEL_* is kept: a script exports its own spans.
		"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318",
		"OTEL_SERVICE_NAME":           "deploy-script",
	}
	for k, v := range kept {
		t.Setenv(k, v)
	}

	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	ctx, span := tp.Tracer("test").Start(t.Context(), "converge.attempt")
	defer span.End()

	dir := t.TempDir()
	e := newExec(t, ExecConfig{
		Command:   []string{writeScript(t, `env > env.txt`)},
		Dir:       dir,
		Env:       []string{"PGHOST=deliberate.example"},
		HiddenEnv: []string{"GITHUB_WEBHOOK_SECRET", "SLACK_SIGNING"},
	})
	req := testRequest()
	if _, err := e.Call(ctx, req); err != nil {
		t.Fatalf("Call: %v", err)
	}
	env := readEnvDump(t, filepath.Join(dir, "env.txt"))

	for k := range secrets {
		switch k {
		case "PGHOST", "CONVERGE_EVENT_ID":
			continue // checked below
		}
		if v, ok := env[k]; ok {
			t.Errorf("the command inherited %s=%q", k, v)
		}
	}
	for k, v := range env {
		for _, s := range secrets {
			if strings.Contains(s, "s3cret") && strings.Contains(v, s) {
				t.Errorf("env %s holds the secret %q", k, s)
			}
		}
	}
	want := map[string]string{
		"PATH":              os.Getenv("PATH"),
		"PGHOST":            "deliberate.example", // the configured Env
		"CONVERGE_EVENT_ID": req.EventID.String(),
		"CONVERGE_RUN_ID":   req.RunID.String(),
		"CONVERGE_ATTEMPT":  "3",
		"CONVERGE_KIND":     "build",
		"CONVERGE_RESOURCE": "app/web",
		"CONVERGE_VERSION":  "42",
	}
	for k, v := range kept {
		want[k] = v
	}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("env %s = %q, want %q", k, env[k], v)
		}
	}
	if tp, trace := env["TRACEPARENT"], span.SpanContext().TraceID().String(); !strings.HasPrefix(tp, "00-"+trace+"-") {
		t.Errorf("TRACEPARENT = %q, want one of trace %s", tp, trace)
	}
}

// TestHiddenEnvName: which names commandEnv removes.
func TestHiddenEnvName(t *testing.T) {
	t.Parallel()
	hidden := []string{"MY_SECRET"}
	for name, want := range map[string]bool{
		"CONVERGE_ADMIN_TOKEN": true, "CONVERGE_": true, "DATABASE_URL": true, "DATABASE_DIRECT_URL": true,
		"PGPASSWORD": true, "PGSSLKEY": true, "PGA": true, "MY_SECRET": true,
		"PATH": false, "HOME": false, "CONVERGE": false, "converge_x": false, "PG": false, "PGx": false, "PG_X": false,
		"DATABASE_URL_X": false, "MY_SECRET_2": false, "": false,
		"OTEL_EXPORTER_OTLP_HEADERS": true, "OTEL_EXPORTER_OTLP_TRACES_HEADERS": true,
		"OTEL_EXPORTER_OTLP_METRICS_HEADERS": true, "OTEL_EXPORTER_OTLP_LOGS_HEADERS": true,
		"OTEL_EXPORTER_OTLP_ENDPOINT": false, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": false, "OTEL_SERVICE_NAME": false,
		"TRACEPARENT": false, "TRACESTATE": false,
	} {
		if got := hiddenEnvName(name, hidden); got != want {
			t.Errorf("hiddenEnvName(%q) = %v, want %v", name, got, want)
		}
	}
	got := commandEnv([]string{"A=1", "PGUSER=x", "B=2=3", "MY_SECRET=s", "C"}, hidden, 0)
	if strings.Join(got, " ") != "A=1 B=2=3 C" {
		t.Errorf("commandEnv = %q", got)
	}
}
