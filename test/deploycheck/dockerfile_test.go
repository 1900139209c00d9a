package deploycheck

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/linter"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
)

// dockerfileUID returns the numeric user id that the final stage of the Dockerfile
// runs as, or -1 if it has none. The Kubernetes check compares runAsUser with it.
func dockerfileUID(src string) int {
	stages, err := parseDockerfile(src, nil)
	if err != nil || len(stages) == 0 {
		return -1
	}
	uid := -1
	for _, cmd := range stages[len(stages)-1].Commands {
		if u, ok := cmd.(*instructions.UserCommand); ok {
			user, _, _ := strings.Cut(u.User, ":")
			n, err := strconv.Atoi(user)
			if err != nil {
				return -1
			}
			uid = n
		}
	}
	return uid
}

// parseDockerfile parses src with BuildKit's parser into its build stages,
// reporting lint warnings to lint (which may be nil).
func parseDockerfile(src string, lint *linter.Linter) ([]instructions.Stage, error) {
	res, err := parser.Parse(strings.NewReader(src))
	if err != nil {
		return nil, fmt.Errorf("parse: %w", err)
	}
	stages, _, err := instructions.Parse(res.AST, lint)
	if err != nil {
		return nil, fmt.Errorf("instructions: %w", err)
	}
	return stages, nil
}

// checkDockerfile returns what is wrong with the Dockerfile src.
func checkDockerfile(src string) []string {
	var problems []string
	lint := linter.New(&linter.Config{
		Warn: func(rule, _, _, msg string, _ []parser.Range) {
			problems = append(problems, fmt.Sprintf("lint %s: %s", rule, msg))
		},
	})
	stages, err := parseDockerfile(src, lint)
	if err != nil {
		return append(problems, err.Error())
	}
	if len(stages) < 2 {
		return append(problems, fmt.Sprintf("not multi-stage: %d stage(s)", len(stages)))
	}

	build, final := stages[0], stages[len(stages)-1]
	if !strings.HasPrefix(build.BaseName, "golang:1.26") {
		problems = append(problems, fmt.Sprintf("build stage is FROM %q, want golang:1.26", build.BaseName))
	}
	if build.Name == "" {
		problems = append(problems, "build stage has no name (FROM ... AS name)")
	}

	// The builder: cgo off, a trimmed static build of ./cmd/converge.
	var cgoOff, goBuild bool
	for _, st := range stages[:len(stages)-1] {
		for _, cmd := range st.Commands {
			switch c := cmd.(type) {
			case *instructions.EnvCommand:
				for _, kv := range c.Env {
					if kv.Key == "CGO_ENABLED" {
						cgoOff = kv.Value == "0"
					}
				}
			case *instructions.RunCommand:
				line := strings.Join(c.CmdLine, " ")
				if strings.Contains(line, "CGO_ENABLED=0") {
					cgoOff = true
				}
				if strings.Contains(line, "CGO_ENABLED=1") {
					problems = append(problems, "a RUN sets CGO_ENABLED=1")
				}
				if !strings.Contains(line, "go build") {
					continue
				}
				goBuild = true
				for _, want := range []string{"-trimpath", "./cmd/converge"} {
					if !strings.Contains(line, want) {
						problems = append(problems, fmt.Sprintf("go build lacks %s: %s", want, line))
					}
				}
			}
		}
	}
	if !cgoOff {
		problems = append(problems, "the build stage does not set CGO_ENABLED=0")
	}
	if !goBuild {
		problems = append(problems, "no stage runs go build")
	}

	// The final stage: minimal base, the binary from the builder, a non-root user.
	minimal := strings.HasPrefix(final.BaseName, "gcr.io/distroless/static") ||
		strings.HasPrefix(final.BaseName, "alpine:")
	if !minimal {
		problems = append(problems, fmt.Sprintf("final stage is FROM %q, want distroless static or alpine", final.BaseName))
	}
	var user string
	var copied, exposed bool
	var entrypoint, command *instructions.ShellDependantCmdLine
	for _, cmd := range final.Commands {
		switch c := cmd.(type) {
		case *instructions.UserCommand:
			user = c.User
		case *instructions.CopyCommand:
			if c.From == build.Name {
				copied = true
			}
		case *instructions.ExposeCommand:
			exposed = exposed || slices.Contains(c.Ports, "8080") || slices.Contains(c.Ports, "8080/tcp")
		case *instructions.EntrypointCommand:
			entrypoint = &c.ShellDependantCmdLine
		case *instructions.CmdCommand:
			command = &c.ShellDependantCmdLine
		}
	}
	uidText, _, _ := strings.Cut(user, ":")
	switch uid, err := strconv.Atoi(uidText); {
	case user == "":
		problems = append(problems, "final stage has no USER: it would run as root")
	case err != nil:
		problems = append(problems, fmt.Sprintf("final stage USER %q is not numeric: Kubernetes runAsNonRoot cannot verify it", user))
	case uid == 0:
		problems = append(problems, "final stage USER is root (0)")
	}
	if !copied {
		problems = append(problems, fmt.Sprintf("final stage copies nothing from the build stage %q", build.Name))
	}
	if !exposed {
		problems = append(problems, "final stage does not EXPOSE 8080")
	}
	if entrypoint == nil || entrypoint.PrependShell || !slices.Equal(entrypoint.CmdLine, []string{"converge"}) {
		problems = append(problems, `ENTRYPOINT is not ["converge"] (exec form)`)
	}
	if command == nil || command.PrependShell || !slices.Equal(command.CmdLine, []string{"serve"}) {
		problems = append(problems, `CMD is not ["serve"] (exec form)`)
	}
	return problems
}

func TestDockerfile(t *testing.T) {
	t.Parallel()
	reportProblems(t, checkDockerfile(readFile(t, "deploy/Dockerfile")))
	if uid := dockerfileUID(readFile(t, "deploy/Dockerfile")); uid <= 0 {
		t.Errorf("final stage user id = %d, want a non-root number", uid)
	}
}

// TestDockerfileChecksFail shows that each check fails on a Dockerfile that breaks it.
func TestDockerfileChecksFail(t *testing.T) {
	t.Parallel()
	src := readFile(t, "deploy/Dockerfile")
	tests := []struct {
		name        string
		old, new    string
		wantProblem string
	}{
		{"root user", "USER 65532:65532", "USER root", "not numeric"},
		{"uid zero", "USER 65532:65532", "USER 0", "root (0)"},
		{"no user", "USER 65532:65532\n", "", "no USER"},
		{"cgo on", "ENV CGO_ENABLED=0 GOOS=linux", "ENV CGO_ENABLED=1 GOOS=linux", "CGO_ENABLED=0"},
		{"no trimpath", "-trimpath ", "", "-trimpath"},
		{"other package", "./cmd/converge\n", "./cmd/other\n", "./cmd/converge"},
		{"old go", "FROM golang:1.26 AS build", "FROM golang:1.22 AS build", "want golang:1.26"},
		{"fat final", "FROM gcr.io/distroless/static-debian12:nonroot AS final", "FROM ubuntu:24.04 AS final", "distroless"},
		{"single stage", "FROM gcr.io/distroless/static-debian12:nonroot AS final\nCOPY --from=build /out/converge /usr/local/bin/converge\n", "", "multi-stage"},
		{"shell entrypoint", `ENTRYPOINT ["converge"]`, "ENTRYPOINT converge", "ENTRYPOINT"},
		{"no serve", `CMD ["serve"]`, `CMD ["api"]`, "CMD"},
		{"no expose", "EXPOSE 8080", "EXPOSE 9090", "EXPOSE 8080"},
		{"lint casing", "FROM golang:1.26 AS build", "FROM golang:1.26 as build", "FromAsCasing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			problems := checkDockerfile(mustReplace(t, src, tt.old, tt.new))
			t.Logf("problems: %q", problems)
			if !problemsContain(problems, tt.wantProblem) {
				t.Errorf("problems %q, want one containing %q", problems, tt.wantProblem)
			}
		})
	}
}

// dockerignoreMatcher returns the patterns of .dockerignore with Docker's matching rules.
func dockerignoreMatcher(t *testing.T) *patternmatcher.PatternMatcher {
	t.Helper()
	patterns, err := ignorefile.ReadAll(strings.NewReader(readFile(t, ".dockerignore")))
	if err != nil {
		t.Fatalf("read .dockerignore: %v", err)
	}
	pm, err := patternmatcher.New(patterns)
	if err != nil {
		t.Fatalf("patterns: %v", err)
	}
	return pm
}

// TestDockerContextHasBuildInputs asks the go command which files of this module
// `go build ./cmd/converge` reads (Go and embedded files of every package it
// depends on) and checks that .dockerignore sends each of them to the builder.
// (-e: a package that does not compile yet still lists its files.)
func TestDockerContextHasBuildInputs(t *testing.T) {
	t.Parallel()
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	root := repoRoot(t)
	cmd := exec.CommandContext(t.Context(), goCmd, "list", "-e", "-deps",
		"-f", `{{if .Module}}{{if .Module.Main}}{{$d := .Dir}}{{range .GoFiles}}{{$d}}/{{.}}{{"\n"}}{{end}}{{range .EmbedFiles}}{{$d}}/{{.}}{{"\n"}}{{end}}{{end}}{{end}}`,
		"./cmd/converge")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps ./cmd/converge: %v", err)
	}
	files := append([]string{"go.mod", "go.sum"}, strings.Fields(string(out))...)
	if len(files) < 4 {
		t.Fatalf("go list named only %q", files)
	}
	pm := dockerignoreMatcher(t)
	for _, f := range files {
		rel := f
		if filepath.IsAbs(f) {
			if rel, err = filepath.Rel(root, f); err != nil {
				t.Fatal(err)
			}
		}
		excluded, err := pm.MatchesOrParentMatches(filepath.ToSlash(rel))
		if err != nil {
			t.Fatalf("match %s: %v", rel, err)
		}
		if excluded {
			t.Errorf("%s is a build input of ./cmd/converge but .dockerignore leaves it out", rel)
		}
	}
}

// TestDockerignore checks .dockerignore with Docker's own matching rules: the build
// inputs stay in the context, secrets and local state stay out.
func TestDockerignore(t *testing.T) {
	t.Parallel()
	tests := []struct {
		path     string
		excluded bool
	}{
		{"go.mod", false},
		{"go.sum", false},
		{"run.go", false},
		{"cmd/converge/main.go", false},
		{"migrations/000001_core.up.sql", false},
		{"migrations/migrate.go", false},
		{"api/templates/layout.html", false},
		{"store/event.go", false},
		{".git/HEAD", true},
		{".env", true},
		{".env.local", true},
		{"converge", true},
		{"bin/converge", true},
		{"test/artifacts/run.log", true},
		{".dev/pgdata/PG_VERSION", true},
		{"deploy/k8s/kustomization.yaml", true},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			t.Parallel()
			// A matcher compiles its patterns on first use, unguarded: one
			// per subtest, as they run in parallel.
			pm := dockerignoreMatcher(t)
			got, err := pm.MatchesOrParentMatches(tt.path)
			if err != nil {
				t.Fatalf("match %s: %v", tt.path, err)
			}
			if got != tt.excluded {
				t.Errorf("%s excluded from the build context = %v, want %v", tt.path, got, tt.excluded)
			}
		})
	}
}
