package observability

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/converge-run/converge/telemetry"
	"github.com/converge-run/converge/test/cvproc"
	"github.com/converge-run/converge/test/pgtest"
	"github.com/converge-run/converge/test/testkit"
)

// liveToken is the admin token of the live process.
const liveToken = "observability-live-admin-token-0123456789"

// liveSample is one line of a /metrics page.
type liveSample struct {
	name   string
	labels map[string]string
	value  float64
}

var (
	liveLine  = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$`)
	liveLabel = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)
)

// livePage is a scraped /metrics page.
type livePage []liveSample

// liveScrape gets and parses base's /metrics.
func liveScrape(t *testing.T, base string) livePage {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, base+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/plain")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", resp.StatusCode, body)
	}
	var page livePage
	for line := range strings.SplitSeq(string(body), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		m := liveLine.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("unparsable /metrics line %q", line)
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			t.Fatalf("/metrics line %q: %v", line, err)
		}
		s := liveSample{name: m[1], labels: map[string]string{}, value: v}
		for _, lp := range liveLabel.FindAllStringSubmatch(m[2], -1) {
			s.labels[lp[1]] = lp[2]
		}
		page = append(page, s)
	}
	return page
}

// value is the value of the sample name{labels...}; ok is false when the
// page has none.
func (p livePage) value(name string, labels ...string) (float64, bool) {
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	for _, s := range p {
		if s.name == name && maps.Equal(s.labels, want) {
			return s.value, true
		}
	}
	return 0, false
}

// names is the set of sample names of the page (a histogram's _bucket,
// _sum and _count).
func (p livePage) names() map[string]bool {
	n := map[string]bool{}
	for _, s := range p {
		n[s.name] = true
	}
	return n
}

// usedNames are the metric names that alerts.yml and the dashboard select,
// each with where it is used.
func usedNames(t *testing.T) map[string]string {
	t.Helper()
	used := map[string]string{}
	add := func(where, expr string) {
		e, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
		if err != nil {
			t.Fatalf("%s: %q does not parse: %v", where, expr, err)
		}
		for _, n := range metricNames(e) {
			used[n] = where
		}
	}
	groups, errs := rulefmt.ParseFile(filepath.Join(dir(t), "alerts.yml"), false, model.UTF8Validation, parser.NewParser(parser.Options{}), slog.New(slog.DiscardHandler))
	if len(errs) > 0 || groups == nil {
		t.Fatalf("alerts.yml: %v", errs)
	}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			add("alerts.yml "+r.Alert+r.Record, r.Expr)
		}
	}
	data, err := os.ReadFile(filepath.Join(dir(t), "grafana", "dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []panel `json:"panels"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("dashboard.json: %v", err)
	}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			walk(p.Panels)
			for _, tg := range p.Targets {
				add("dashboard panel "+p.Title, grafanaVariable.ReplaceAllString(tg.Expr, "5m"))
			}
		}
	}
	walk(dash.Panels)
	return used
}

// TestLiveMetrics runs `converge serve` (the real binary) on a migrated
// database with kinds build and deploy and checks its /metrics: at start-up
// every series of SPEC §14 is exported at zero for each configured kind
// and each status, outcome, reason and table; after an event ran and one
// was refused, the counters moved; and every metric that alerts.yml and
// the Grafana dashboard use is on the page.
func TestLiveMetrics(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
	t.Cleanup(target.Close)
	cfg := testkit.ConfigFile(t, fmt.Sprintf(`listen: 127.0.0.1:0
database_url: %s
river: {fetch_poll_interval: 20ms}
kinds:
  build:
    target: {http: {url: %s/build, timeout: 10s}}
  deploy:
    target: {http: {url: %s/deploy, timeout: 10s}}
# A workflow and an event source: their metrics' series are per workflow
# and per source, so that every metric name is on the page.
workflows:
  release:
    steps:
      build: {kind: build}
sources:
  gh:
    type: github
    secret_env: LIVE_GH_SECRET
    rules:
      - {kind: build, resource: 'body.repository', version: auto}
`, db, target.URL, target.URL))
	p := cvproc.Start(t, cvproc.Options{Args: []string{"serve", "--config", cfg},
		Env: cvproc.Env("CONVERGE_ADMIN_TOKEN="+liveToken, "LIVE_GH_SECRET=live-source-secret")})
	base := p.URL(t, 60*time.Second)
	cvproc.WaitHTTP(t, base+"/healthz", 10*time.Second)

	kinds := []string{"build", "deploy"}
	start := liveScrape(t, base)
	zero := func(name string, labels ...string) {
		t.Helper()
		v, ok := start.value(name, labels...)
		if !ok {
			t.Errorf("at start-up /metrics has no %s%v", name, labels)
		} else if v != 0 {
			t.Errorf("at start-up %s%v = %v, want 0", name, labels, v)
		}
	}
	for _, k := range kinds {
		for _, src := range []string{telemetry.SourceAPI, telemetry.SourceWorkflow} {
			zero("converge_events_accepted_total", "kind", k, "source", src)
		}
		zero("converge_runs_superseded_total", "kind", k)
		for _, o := range telemetry.AttemptOutcomes {
			zero("converge_attempts_total", "kind", k, "outcome", o)
		}
		zero("converge_attempt_duration_seconds_count", "kind", k)
		zero("converge_queue_lag_seconds_count", "kind", k)
		zero("converge_attempts_fenced_total", "kind", k)
		for _, s := range telemetry.RunStatuses {
			zero("converge_runs", "kind", k, "status", s)
		}
		zero("converge_dead_letters_open", "kind", k)
		zero("converge_streams_quarantined", "kind", k)
	}
	for _, k := range append(kinds, telemetry.UnknownLabel) {
		for _, r := range telemetry.RejectReasons {
			zero("converge_events_rejected_total", "kind", k, "reason", r)
		}
	}
	for _, o := range telemetry.NotificationOutcomes {
		zero("converge_notifications_total", "outcome", o)
	}
	for _, tb := range telemetry.PrunedTables {
		zero("converge_pruned_rows_total", "table", tb)
	}
	zero("converge_batch_fallbacks_total")
	zero("converge_scrape_errors_total")
	if _, ok := start.value("converge_worker_last_poll_timestamp_seconds"); !ok {
		t.Error("at start-up /metrics has no converge_worker_last_poll_timestamp_seconds")
	}

	// One event through, one refused (an unknown kind), one without a token.
	post := func(token string, body any) int {
		b, _ := json.Marshal(body)
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/v1/events", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("POST /v1/events: %v", err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	event := map[string]any{"kind": "build", "resource": "app/web", "version": 1, "payload": map[string]any{}}
	if got := post(liveToken, event); got != http.StatusAccepted {
		t.Fatalf("submit: %d", got)
	}
	if got := post(liveToken, event); got != http.StatusOK {
		t.Fatalf("replay: %d", got)
	}
	if got := post(liveToken, map[string]any{"kind": "nope", "resource": "x", "version": 1}); got != http.StatusUnprocessableEntity {
		t.Fatalf("unknown kind: %d", got)
	}
	if got := post("", event); got != http.StatusUnauthorized {
		t.Fatalf("no token: %d", got)
	}
	var page livePage
	testkit.Eventually(t, 30*time.Second, func() (bool, string) {
		page = liveScrape(t, base)
		v, _ := page.value("converge_attempts_total", "kind", "build", "outcome", "succeeded")
		return v == 1, fmt.Sprintf("converge_attempts_total{kind=build,outcome=succeeded} = %v", v)
	})
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"converge_events_accepted_total", []string{"kind", "build", "source", "api"}, 1},
		{"converge_events_rejected_total", []string{"kind", "unknown", "reason", "invalid-request"}, 1},
		{"converge_events_rejected_total", []string{"kind", "unknown", "reason", "unauthorized"}, 1},
		{"converge_attempt_duration_seconds_count", []string{"kind", "build"}, 1},
		{"converge_queue_lag_seconds_count", []string{"kind", "build"}, 1},
		{"converge_attempts_total", []string{"kind", "deploy", "outcome", "succeeded"}, 0},
	} {
		if v, _ := page.value(c.name, c.labels...); v != c.want {
			t.Errorf("after the events %s%v = %v, want %v", c.name, c.labels, v, c.want)
		}
	}
	if v, _ := page.value("converge_worker_last_poll_timestamp_seconds"); time.Since(time.Unix(int64(v), 0)) > time.Minute {
		t.Errorf("converge_worker_last_poll_timestamp_seconds = %v, not recent", v)
	}

	have := page.names()
	used := usedNames(t)
	for _, n := range slices.Sorted(maps.Keys(used)) {
		if !have[n] {
			t.Errorf("%s uses %s, which the live /metrics does not have", used[n], n)
		}
	}
	t.Logf("%d metric names of alerts.yml and the dashboard checked against the live /metrics", len(used))
}
