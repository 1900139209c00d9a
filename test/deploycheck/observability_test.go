package deploycheck

import (
	"maps"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
)

// TestComposeObservabilityProfile loads docker-compose.yml with the
// observability profile, as `docker compose --profile observability up`
// does, and with OTEL_EXPORTER_OTLP_ENDPOINT set as .env.example says for
// it: Prometheus, Grafana and Jaeger are added, Jaeger takes OTLP/HTTP on
// 4318 where converge exports its spans, and the dashboard's ui.trace_url
// points at Jaeger's UI. Without the endpoint (the .env.example default)
// converge's tracing is off.
func TestComposeObservabilityProfile(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	env := envExample(t)
	if v, ok := env["OTEL_EXPORTER_OTLP_ENDPOINT"]; !ok || v != "" {
		t.Errorf(".env.example OTEL_EXPORTER_OTLP_ENDPOINT = %q (set %v), want documented and empty (tracing off without Jaeger)", v, ok)
	}
	plain, err := loadCompose(t, readFile(t, "docker-compose.yml"), env)
	if err != nil {
		t.Fatal(err)
	}
	if v := envValue(plain.Services["converge"], "OTEL_EXPORTER_OTLP_ENDPOINT"); v != "" {
		t.Errorf("without the profile converge exports spans to %q, want nowhere", v)
	}
	env = maps.Clone(env)
	env["OTEL_EXPORTER_OTLP_ENDPOINT"] = "http://jaeger:4318"
	env = maps.Clone(env)
	p, err := loader.LoadWithContext(t.Context(), types.ConfigDetails{
		WorkingDir:  root,
		ConfigFiles: []types.ConfigFile{{Filename: root + "/docker-compose.yml", Content: []byte(readFile(t, "docker-compose.yml"))}},
		Environment: env,
	}, loader.WithProfiles([]string{"observability"}))
	if err != nil {
		t.Fatalf("load with --profile observability: %v", err)
	}
	for _, name := range []string{"prometheus", "grafana", "jaeger"} {
		if _, ok := p.Services[name]; !ok {
			t.Errorf("the observability profile has no %s service (services %v)", name, slices.Sorted(maps.Keys(p.Services)))
		}
	}
	jaeger := p.Services["jaeger"]
	if !slices.Contains(jaeger.Expose, "4318") {
		t.Errorf("jaeger exposes %v, want OTLP/HTTP 4318", jaeger.Expose)
	}
	if envValue(jaeger, "COLLECTOR_OTLP_ENABLED") != "true" {
		t.Error("jaeger does not enable its OTLP collector")
	}
	uiPort := ""
	for _, port := range jaeger.Ports {
		if port.Target == 16686 {
			uiPort = port.Published
		}
	}
	if uiPort == "" {
		t.Error("jaeger does not publish its UI (16686)")
	}
	conv := p.Services["converge"]
	endpoint := envValue(conv, "OTEL_EXPORTER_OTLP_ENDPOINT")
	if u, err := url.Parse(endpoint); err != nil || u.Hostname() != "jaeger" || u.Port() != "4318" || u.Scheme != "http" {
		t.Errorf("converge OTEL_EXPORTER_OTLP_ENDPOINT = %q, want http://jaeger:4318", endpoint)
	}
	if envValue(conv, "OTEL_SERVICE_NAME") != "converge" {
		t.Errorf("converge OTEL_SERVICE_NAME = %q", envValue(conv, "OTEL_SERVICE_NAME"))
	}
	data, err := os.ReadFile(p.Configs["converge-config"].File)
	if err != nil {
		t.Fatal(err)
	}
	cfg, problems := checkConvergeConfig(data)
	if len(problems) > 0 {
		t.Fatalf("converge config: %v", problems)
	}
	if want := "http://localhost:" + uiPort + "/trace/{trace_id}"; cfg.UI.TraceURL != want || !strings.Contains(cfg.UI.TraceURL, "{trace_id}") {
		t.Errorf("converge config ui.trace_url = %q, want %q (Jaeger's published UI)", cfg.UI.TraceURL, want)
	}
}
