package deploycheck

import (
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/dotenv"
	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
)

// composeImageServices are the services that run the converge image.
var composeImageServices = []string{"migrate", "converge", "demo-target"}

// envExample returns the variables that .env.example sets.
func envExample(t *testing.T) map[string]string {
	t.Helper()
	env, err := dotenv.UnmarshalBytesWithLookup([]byte(readFile(t, ".env.example")), nil)
	if err != nil {
		t.Fatalf("parse .env.example: %v", err)
	}
	return env
}

// loadCompose loads content as docker-compose.yml at the repository root with the
// Compose Specification loader (schema validation, interpolation, merge keys,
// consistency checks), in the environment env and nothing else.
func loadCompose(t *testing.T, content string, env map[string]string) (*types.Project, error) {
	t.Helper()
	root := repoRoot(t)
	// The loader writes into the environment map (COMPOSE_PROJECT_NAME):
	// give it a copy so that parallel tests can share env.
	env = maps.Clone(env)
	return loader.LoadWithContext(t.Context(), types.ConfigDetails{
		WorkingDir: root,
		ConfigFiles: []types.ConfigFile{{
			Filename: filepath.Join(root, "docker-compose.yml"),
			Content:  []byte(content),
		}},
		Environment: env,
	})
}

// envValue returns the value of the environment variable name of a service.
func envValue(svc types.ServiceConfig, name string) string {
	if v := svc.Environment[name]; v != nil {
		return *v
	}
	return ""
}

// checkCompose returns what is wrong with the loaded compose project p, given the
// environment env it was loaded in.
func checkCompose(root string, p *types.Project, env map[string]string) []string {
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }

	want := append([]string{"postgres"}, composeImageServices...)
	if got := slices.Sorted(maps.Keys(p.Services)); !slices.Equal(got, slices.Sorted(slices.Values(want))) {
		add("services = %v, want %v", got, want)
	}
	dependsOn := func(svc, on, condition string) {
		dep, ok := p.Services[svc].DependsOn[on]
		if !ok {
			add("%s does not depend on %s", svc, on)
		} else if dep.Condition != condition {
			add("%s depends on %s with condition %q, want %s", svc, on, dep.Condition, condition)
		}
	}

	// PostgreSQL: a pinned major version, a health check, its data on a named volume.
	pg := p.Services["postgres"]
	if !regexp.MustCompile(`^postgres:1[56](\.[0-9]+)*(-[a-z0-9.]+)?$`).MatchString(pg.Image) {
		add("postgres image %q does not pin major version 15 or 16", pg.Image)
	}
	if hc := pg.HealthCheck; hc == nil || hc.Disable || len(hc.Test) < 2 ||
		!slices.Contains([]string{"CMD", "CMD-SHELL"}, hc.Test[0]) ||
		!strings.Contains(strings.Join(hc.Test[1:], " "), "pg_isready") {
		add("postgres has no pg_isready healthcheck: %+v", hc)
	}
	dataOnVolume := false
	for _, v := range pg.Volumes {
		if v.Type == types.VolumeTypeVolume && v.Target == "/var/lib/postgresql/data" {
			_, declared := p.Volumes[v.Source]
			dataOnVolume = declared
		}
	}
	if !dataOnVolume {
		add("postgres data (/var/lib/postgresql/data) is not on a declared named volume")
	}

	// One converge image, built from deploy/Dockerfile at the repository root.
	images := map[string]bool{}
	for _, name := range composeImageServices {
		svc := p.Services[name]
		images[svc.Image] = true
		if svc.Build == nil {
			add("%s has no build section", name)
			continue
		}
		dockerfile := svc.Build.Dockerfile
		if !filepath.IsAbs(dockerfile) {
			dockerfile = filepath.Join(svc.Build.Context, dockerfile)
		}
		if svc.Build.Context != root || dockerfile != filepath.Join(root, "deploy", "Dockerfile") {
			add("%s builds %s in %s, want deploy/Dockerfile in the repository root", name, svc.Build.Dockerfile, svc.Build.Context)
		}
		if !svc.ReadOnly {
			add("%s has a writable root filesystem (read_only: true)", name)
		}
	}
	if len(images) != 1 {
		add("the converge services use %d image names, want one: %v", len(images), slices.Collect(maps.Keys(images)))
	}

	// migrate: one shot, after PostgreSQL is healthy.
	mig := p.Services["migrate"]
	if !slices.Equal(mig.Command, []string{"migrate", "up"}) {
		add("migrate runs %q, want [migrate up]", mig.Command)
	}
	if mig.Restart != "" && mig.Restart != "no" {
		add("migrate restarts (%q): a one-shot service must not", mig.Restart)
	}
	dependsOn("migrate", "postgres", types.ServiceConditionHealthy)

	// converge serve: after the migration, on localhost:8080.
	srv := p.Services["converge"]
	if !slices.Equal(srv.Command, []string{"serve"}) {
		add("converge runs %q, want [serve]", srv.Command)
	}
	dependsOn("converge", "postgres", types.ServiceConditionHealthy)
	dependsOn("converge", "migrate", types.ServiceConditionCompletedSuccessfully)
	if _, ok := srv.DependsOn["demo-target"]; !ok {
		add("converge does not depend on demo-target")
	}
	published := false
	for _, port := range srv.Ports {
		if port.Target == 8080 && port.Published == "8080" && (port.HostIP == "" || port.HostIP == "127.0.0.1") {
			published = true
		}
	}
	if !published {
		add("converge does not publish container port 8080 on localhost:8080: %+v", srv.Ports)
	}
	if got := envValue(srv, "CONVERGE_LISTEN"); got != "0.0.0.0:8080" {
		add("converge CONVERGE_LISTEN = %q, want 0.0.0.0:8080 (reachable from outside the container)", got)
	}
	if got, want := envValue(srv, "CONVERGE_ADMIN_TOKEN"), env["CONVERGE_ADMIN_TOKEN"]; got == "" || got != want {
		add("converge CONVERGE_ADMIN_TOKEN = %q, want the env file's %q", got, want)
	}
	for _, name := range []string{"migrate", "converge"} {
		db, err := url.Parse(envValue(p.Services[name], "DATABASE_URL"))
		switch {
		case err != nil:
			add("%s DATABASE_URL: %v", name, err)
		case db.Hostname() != "postgres":
			add("%s DATABASE_URL host %q, want the postgres service", name, db.Hostname())
		case db.User.Username() != envValue(pg, "POSTGRES_USER") || strings.TrimPrefix(db.Path, "/") != envValue(pg, "POSTGRES_DB"):
			add("%s DATABASE_URL user or database differ from the postgres service's", name)
		default:
			if pw, _ := db.User.Password(); pw != envValue(pg, "POSTGRES_PASSWORD") {
				add("%s DATABASE_URL password differs from POSTGRES_PASSWORD", name)
			}
		}
	}

	// converge's configuration file: mounted where CONVERGE_CONFIG says, with the
	// build kind calling the demo target.
	configPath := envValue(srv, "CONVERGE_CONFIG")
	var configFile string
	for _, c := range srv.Configs {
		if c.Target == configPath {
			configFile = p.Configs[c.Source].File
		}
	}
	if configFile == "" {
		add("CONVERGE_CONFIG %q is not where a config is mounted", configPath)
	} else if data, err := os.ReadFile(configFile); err != nil {
		add("read converge config: %v", err)
	} else {
		cfg, cfgProblems := checkConvergeConfig(data)
		problems = append(problems, cfgProblems...)
		if cfg != nil {
			if build, ok := cfg.Kinds["build"]; !ok || build.Target.HTTP == nil || build.Target.HTTP.URL != "http://demo-target:9000/build" {
				add("converge config: the build kind does not call http://demo-target:9000/build")
			}
			for name, k := range cfg.Kinds {
				if k.Target.HTTP == nil {
					add("converge config: kind %s has no HTTP target; the image has no commands to exec", name)
				} else if u, err := url.Parse(k.Target.HTTP.URL); err != nil || u.Host != "demo-target:9000" {
					add("converge config: kind %s calls %s, not the demo target", name, k.Target.HTTP.URL)
				}
			}
		}
	}

	// The demo target listens on all interfaces, port 9000.
	demo := p.Services["demo-target"]
	if len(demo.Command) == 0 || demo.Command[0] != "demo-target" {
		add("demo-target runs %q, want converge demo-target", demo.Command)
	}
	listen := ""
	for _, arg := range demo.Command {
		if host, port, err := net.SplitHostPort(arg); err == nil && port == "9000" {
			listen = host
		}
	}
	if listen != "0.0.0.0" {
		add("demo-target does not listen on 0.0.0.0:9000: %q", demo.Command)
	}
	return problems
}

func TestCompose(t *testing.T) {
	t.Parallel()
	env := envExample(t)
	p, err := loadCompose(t, readFile(t, "docker-compose.yml"), env)
	if err != nil {
		t.Fatalf("load docker-compose.yml with .env.example: %v", err)
	}
	reportProblems(t, checkCompose(repoRoot(t), p, env))
}

// TestComposeNeedsAdminToken checks that docker compose refuses to start without
// CONVERGE_ADMIN_TOKEN rather than start converge without an operator token.
func TestComposeNeedsAdminToken(t *testing.T) {
	t.Parallel()
	env := envExample(t)
	delete(env, "CONVERGE_ADMIN_TOKEN")
	_, err := loadCompose(t, readFile(t, "docker-compose.yml"), env)
	if err == nil || !strings.Contains(err.Error(), "CONVERGE_ADMIN_TOKEN") {
		t.Errorf("load without CONVERGE_ADMIN_TOKEN: err = %v, want one naming CONVERGE_ADMIN_TOKEN", err)
	}
}

// TestEnvExample checks that .env.example documents every variable that
// docker-compose.yml reads.
func TestEnvExample(t *testing.T) {
	t.Parallel()
	env := envExample(t)
	if env["CONVERGE_ADMIN_TOKEN"] == "" {
		t.Error(".env.example does not set CONVERGE_ADMIN_TOKEN")
	}
	refs := regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)`).FindAllStringSubmatch(readFile(t, "docker-compose.yml"), -1)
	if len(refs) == 0 {
		t.Fatal("docker-compose.yml reads no variables; expected at least CONVERGE_ADMIN_TOKEN")
	}
	for _, m := range refs {
		if _, ok := env[m[1]]; !ok {
			t.Errorf("docker-compose.yml reads %s, which .env.example does not document", m[1])
		}
	}
}

// TestComposeChecksFail shows that each check fails on a compose file that breaks it.
func TestComposeChecksFail(t *testing.T) {
	t.Parallel()
	src := readFile(t, "docker-compose.yml")
	tests := []struct {
		name        string
		old, new    string
		wantProblem string
	}{
		{"postgres latest", "image: postgres:16", "image: postgres:latest", "major version"},
		{"no healthcheck", "    healthcheck:\n      # -h", "    x-healthcheck:\n      # -h", "healthcheck"},
		{
			"migrate before postgres is healthy",
			"    command: [\"migrate\", \"up\"]\n    environment:\n      DATABASE_URL: postgres://converge:${POSTGRES_PASSWORD:-converge}@postgres:5432/converge?sslmode=disable\n    depends_on:\n      postgres:\n        condition: service_healthy",
			"    command: [\"migrate\", \"up\"]\n    environment:\n      DATABASE_URL: postgres://converge:${POSTGRES_PASSWORD:-converge}@postgres:5432/converge?sslmode=disable\n    depends_on:\n      postgres:\n        condition: service_started",
			"condition \"service_started\", want service_healthy",
		},
		{"serve before migrate", "condition: service_completed_successfully", "condition: service_started", "service_completed_successfully"},
		{"other dockerfile", "dockerfile: deploy/Dockerfile", "dockerfile: Dockerfile", "want deploy/Dockerfile"},
		{"other port", `"127.0.0.1:${CONVERGE_PORT:-8080}:8080"`, `"127.0.0.1:${CONVERGE_PORT:-8080}:8081"`, "port 8080"},
		{"listen on loopback", "CONVERGE_LISTEN: 0.0.0.0:8080", "CONVERGE_LISTEN: 127.0.0.1:8080", "CONVERGE_LISTEN"},
		{"serve runs api", `command: ["serve"]`, `command: ["api"]`, "want [serve]"},
		{"demo on loopback", `"--listen", "0.0.0.0:9000"`, `"--listen", "127.0.0.1:9000"`, "0.0.0.0:9000"},
		{"wrong database host", "@postgres:5432/converge?sslmode=disable\n    depends_on:\n      postgres:\n        condition: service_healthy\n    restart: \"no\"", "@localhost:5432/converge?sslmode=disable\n    depends_on:\n      postgres:\n        condition: service_healthy\n    restart: \"no\"", "DATABASE_URL host"},
		{"writable", "  read_only: true\n", "  read_only: false\n", "read_only"},
	}
	env := envExample(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, err := loadCompose(t, mustReplace(t, src, tt.old, tt.new), env)
			if err != nil {
				t.Fatalf("load mutated compose file: %v", err)
			}
			problems := checkCompose(repoRoot(t), p, env)
			t.Logf("problems: %q", problems)
			if !problemsContain(problems, tt.wantProblem) {
				t.Errorf("problems %q, want one containing %q", problems, tt.wantProblem)
			}
		})
	}
}
