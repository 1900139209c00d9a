package observability

import (
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/converge-run/converge/telemetry"
	"github.com/converge-run/converge/test/pgtest"
)

// promtoolVersion is the Prometheus release whose promtool runs
// alerts_test.yml: the version of github.com/prometheus/prometheus in this
// module's go.mod.
const promtoolVersion = "v0.316.0"

// dir is deploy/observability in the repository.
func dir(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("no caller information")
	}
	return filepath.Join(filepath.Dir(file), "..", "..", "deploy", "observability")
}

// exported is the set of metric names a converge process exports: those of
// telemetry.NewMetrics and telemetry.DatabaseCollector, gathered from a
// registry as /metrics would show them (histograms with their _bucket,
// _sum and _count series), with a workflow and a source configured, which
// a live process of this branch cannot have; TestLiveMetrics checks a live
// /metrics of the binary.
func exported(t *testing.T) map[string]bool {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	kinds := []string{"build", "deploy"}
	telemetry.NewMetrics(reg, telemetry.Labels{Kinds: kinds, Workflows: []string{"release"}, Sources: []string{"github"}})
	reg.MustRegister(telemetry.NewDatabaseCollector(pgtest.Pool(t), telemetry.DatabaseCollectorParams{Kinds: kinds}))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
		if mf.GetType().String() == "HISTOGRAM" {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				names[mf.GetName()+suffix] = true
			}
		}
	}
	for _, want := range []string{"converge_runs", "converge_dead_letters_open", "converge_streams_quarantined"} {
		if !names[want] {
			t.Fatalf("the database collector exports no %s", want)
		}
	}
	return names
}

// metricNames are the metric names that expr selects.
func metricNames(expr parser.Expr) []string {
	var names []string
	parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
		if vs, ok := node.(*parser.VectorSelector); ok {
			name := vs.Name
			for _, m := range vs.LabelMatchers {
				if m.Name == "__name__" {
					name = m.Value
				}
			}
			if name != "" && !slices.Contains(names, name) {
				names = append(names, name)
			}
		}
		return nil
	})
	return names
}

// parseExpr parses a PromQL expression, failing the test on error.
func parseExpr(t *testing.T, where, expr string) parser.Expr {
	t.Helper()
	e, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		t.Errorf("%s: %q does not parse: %v", where, expr, err)
		return nil
	}
	return e
}

// checkNames reports names of expr that converge does not export.
func checkNames(t *testing.T, where string, expr parser.Expr, names map[string]bool) {
	t.Helper()
	for _, n := range metricNames(expr) {
		if !names[n] {
			t.Errorf("%s uses %s, which converge does not export", where, n)
		}
	}
}

func TestAlertRules(t *testing.T) {
	t.Parallel()
	names := exported(t)
	groups, errs := rulefmt.ParseFile(filepath.Join(dir(t), "alerts.yml"), false, model.UTF8Validation, parser.NewParser(parser.Options{}), slog.New(slog.DiscardHandler))
	for _, err := range errs {
		t.Errorf("alerts.yml: %v", err)
	}
	if groups == nil {
		t.FailNow()
	}
	var alerts []string
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			where := "alerts.yml " + r.Alert + r.Record
			e := parseExpr(t, where, r.Expr)
			if e == nil {
				continue
			}
			checkNames(t, where, e, names)
			if len(metricNames(e)) == 0 {
				t.Errorf("%s selects no metric", where)
			}
			if r.Alert != "" {
				alerts = append(alerts, r.Alert)
				for _, k := range []string{"severity"} {
					if r.Labels[k] == "" {
						t.Errorf("%s has no %s label", where, k)
					}
				}
				for _, k := range []string{"summary", "runbook"} {
					if r.Annotations[k] == "" {
						t.Errorf("%s has no %s annotation", where, k)
					}
				}
			}
		}
	}
	// SPEC §14's alerts, and group-commit fallbacks.
	for _, want := range []string{"ConvergeDeadLettersGrowing", "ConvergeQueueLagHigh", "ConvergeNoWorkerPolling",
		"ConvergeStreamsQuarantined", "ConvergeNotificationsFailing", "ConvergeBatchFallbacks"} {
		if !slices.Contains(alerts, want) {
			t.Errorf("alerts.yml has no %s", want)
		}
	}
	// Every alert has a runbook section in docs/observability.md.
	doc, err := os.ReadFile(filepath.Join(dir(t), "..", "..", "docs", "observability.md"))
	if err != nil {
		t.Fatalf("read docs/observability.md: %v", err)
	}
	for _, a := range alerts {
		if !strings.Contains(string(doc), "### "+a) {
			t.Errorf("docs/observability.md has no runbook section ### %s", a)
		}
	}
}

// grafanaVariable matches the Grafana variables a panel's query may use.
var grafanaVariable = regexp.MustCompile(`\$(__rate_interval|__interval|__range)\b|\$\{(__rate_interval|__interval|__range)\}`)

// panel is what the test reads of a Grafana panel.
type panel struct {
	Title   string  `json:"title"`
	Type    string  `json:"type"`
	Panels  []panel `json:"panels"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

func TestDashboard(t *testing.T) {
	t.Parallel()
	names := exported(t)
	data, err := os.ReadFile(filepath.Join(dir(t), "grafana", "dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		UID    string  `json:"uid"`
		Panels []panel `json:"panels"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("dashboard.json: %v", err)
	}
	if dash.UID == "" {
		t.Error("dashboard.json has no uid")
	}
	used := map[string]bool{}
	exprs := 0
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			walk(p.Panels)
			if p.Type != "row" && len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			for _, tg := range p.Targets {
				exprs++
				// Grafana replaces its interval variables before sending the
				// query; so does the test.
				expr := grafanaVariable.ReplaceAllString(tg.Expr, "5m")
				if strings.Contains(expr, "$") {
					t.Errorf("panel %q: %q uses a variable the test does not know", p.Title, tg.Expr)
					continue
				}
				where := "dashboard panel " + p.Title
				if e := parseExpr(t, where, expr); e != nil {
					checkNames(t, where, e, names)
					for _, n := range metricNames(e) {
						used[n] = true
					}
				}
			}
		}
	}
	walk(dash.Panels)
	if exprs == 0 {
		t.Fatal("dashboard.json has no queries")
	}
	// The dashboard shows every metric of SPEC §14.
	for n := range names {
		base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(n, "_bucket"), "_sum"), "_count")
		if used[n] || used[base+"_bucket"] || used[base] {
			continue
		}
		t.Errorf("no dashboard panel shows %s", n)
	}
	t.Logf("%d queries over %v", exprs, slices.Sorted(maps.Keys(used)))
}

// promtool returns a promtool binary: $PROMTOOL, one on PATH, one built
// before into the user cache, or, with OBSERVABILITY_BUILD_PROMTOOL=1, one
// built now from this module's Prometheus version (go install, given five
// minutes: it compiles all of Prometheus' service discovery). It skips the
// test when none can be had.
func promtool(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("PROMTOOL"); p != "" {
		return p
	}
	if p, err := exec.LookPath("promtool"); err == nil {
		return p
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	bin := filepath.Join(cache, "converge-test", "promtool-"+promtoolVersion)
	if _, err := os.Stat(filepath.Join(bin, "promtool")); err == nil {
		return filepath.Join(bin, "promtool")
	}
	if os.Getenv("OBSERVABILITY_BUILD_PROMTOOL") != "1" {
		t.Skipf("no promtool, so alerts_test.yml is not run: set PROMTOOL to a promtool binary, put one on PATH, "+
			"or set OBSERVABILITY_BUILD_PROMTOOL=1 to build %s into %s (several minutes)", promtoolVersion, bin)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "install", "github.com/prometheus/prometheus/cmd/promtool@"+promtoolVersion)
	cmd.Env = append(os.Environ(), "GOBIN="+bin, "GOFLAGS=-mod=mod")
	cmd.Dir = os.TempDir() // outside any module: go install pkg@version
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Skipf("promtool %s could not be built (%v), so alerts_test.yml is not run; set PROMTOOL to a promtool binary to run it:\n%s",
			promtoolVersion, err, lastLines(string(out), 10))
	}
	return filepath.Join(bin, "promtool")
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func TestAlertRulesUnitTests(t *testing.T) {
	if testing.Short() {
		t.Skip("builds promtool; not with -short")
	}
	t.Parallel()
	bin := promtool(t)
	d := dir(t)
	for _, args := range [][]string{{"check", "rules", "alerts.yml"}, {"test", "rules", "alerts_test.yml"}} {
		cmd := exec.CommandContext(t.Context(), bin, args...)
		cmd.Dir = d
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		} else {
			t.Logf("promtool %s:\n%s", strings.Join(args, " "), out)
		}
	}
}
