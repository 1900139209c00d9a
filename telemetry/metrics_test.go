package telemetry_test

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/telemetry"
)

// testLabels is the configuration the tests export metrics for.
var testLabels = telemetry.Labels{Kinds: []string{"build", "deploy"}, Workflows: []string{"release"}, Sources: []string{"github"}}

func TestNewMetricsExportsEverySeriesAtZero(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	telemetry.NewMetrics(reg, testLabels)
	got := scrape(t, reg)

	kinds := len(testLabels.Kinds)
	want := []struct {
		name   string
		typ    string
		series int
		labels []string
	}{
		{"converge_events_accepted_total", "counter", kinds * 3, []string{"kind", "source"}}, // api, workflow, github
		{"converge_events_rejected_total", "counter", (kinds + 1) * len(telemetry.RejectReasons), []string{"kind", "reason"}},
		{"converge_runs_superseded_total", "counter", kinds, []string{"kind"}},
		{"converge_attempts_total", "counter", kinds * 5, []string{"kind", "outcome"}},
		{"converge_attempt_duration_seconds", "histogram", kinds, []string{"kind"}},
		{"converge_queue_lag_seconds", "histogram", kinds, []string{"kind"}},
		{"converge_workflow_runs_total", "counter", 6, []string{"status", "workflow"}},
		{"converge_deliveries_total", "counter", 3, []string{"source", "status"}},
		{"converge_notifications_total", "counter", 3, []string{"outcome"}},
		{"converge_pruned_rows_total", "counter", 7, []string{"table"}},
		{"converge_attempts_fenced_total", "counter", kinds, []string{"kind"}},
		{"converge_worker_last_poll_timestamp_seconds", "gauge", 1, nil},
		{"converge_batch_fallbacks_total", "counter", 1, nil},
	}
	if len(got.types) != len(want) {
		t.Errorf("exported %d metric families %v, want %d", len(got.types), slices.Sorted(maps.Keys(got.types)), len(want))
	}
	for _, w := range want {
		typ, ok := got.types[w.name]
		if !ok {
			t.Errorf("%s is not exported", w.name)
			continue
		}
		if typ != w.typ {
			t.Errorf("%s is a %s, want a %s", w.name, typ, w.typ)
		}
		series := got.series(w.name)
		if len(series) != w.series {
			t.Errorf("%s has %d series, want %d", w.name, len(series), w.series)
		}
		for _, s := range series {
			if names := slices.Sorted(maps.Keys(s.labels)); !slices.Equal(names, w.labels) {
				t.Errorf("%s has labels %v, want %v", w.name, names, w.labels)
			}
			if s.value != 0 {
				t.Errorf("%s%v = %v at start-up, want 0", w.name, s.labels, s.value)
			}
		}
	}
	checks := []struct {
		name, label string
		want        []string
	}{
		{"converge_attempts_total", "outcome", []string{"abandoned", "cancelled", "permanent_error", "succeeded", "transient_error"}},
		{"converge_pruned_rows_total", "table", []string{"attempts", "audit", "dead_letters", "deliveries", "events", "runs", "workflow_runs"}},
		{"converge_events_rejected_total", "kind", []string{"build", "deploy", "unknown"}},
		{"converge_events_accepted_total", "source", []string{"api", "github", "workflow"}},
		{"converge_workflow_runs_total", "status", []string{"cancelled", "failed", "running", "succeeded", "superseded", "waiting"}},
		{"converge_deliveries_total", "status", []string{"accepted", "ignored", "rejected"}},
		{"converge_notifications_total", "outcome", []string{"failed", "obsolete", "sent"}},
	}
	for _, c := range checks {
		if got := got.labelValues(c.name, c.label); !slices.Equal(got, c.want) {
			t.Errorf("%s %s = %v, want %v", c.name, c.label, got, c.want)
		}
	}
	for _, slug := range []string{"invalid-request", "malformed-json", "payload-too-large", "stale-version", "version-conflict", "unauthorized", "forbidden", "rate-limited", "unsupported-media-type"} {
		if _, ok := got.value("converge_events_rejected_total", "kind", "build", "reason", slug); !ok {
			t.Errorf("converge_events_rejected_total{kind=build,reason=%s} is not exported", slug)
		}
	}

	// Registered once per process.
	defer func() {
		if recover() == nil {
			t.Error("a second NewMetrics on the same registry did not panic")
		}
	}()
	telemetry.NewMetrics(reg, testLabels)
}

func TestNewMetricsWithoutWorkflowsOrSources(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	telemetry.NewMetrics(reg, telemetry.Labels{Kinds: []string{"build"}})
	got := scrape(t, reg)
	// No workflow or source configured: the metrics of their names are
	// still there, at zero, under "unknown" only (every metric SPEC §14
	// names is on /metrics whatever the configuration).
	for _, c := range []struct {
		metric, label string
		series        int
	}{{"converge_workflow_runs_total", "workflow", len(telemetry.WorkflowRunStatuses)}, {"converge_deliveries_total", "source", len(telemetry.DeliveryStatuses)}} {
		if n := len(got.series(c.metric)); n != c.series {
			t.Errorf("%s has %d series with none configured, want %d", c.metric, n, c.series)
		}
		if vs := got.labelValues(c.metric, c.label); !slices.Equal(vs, []string{"unknown"}) {
			t.Errorf("%s's %s values = %v, want [unknown]", c.metric, c.label, vs)
		}
	}
	if got := got.labelValues("converge_events_accepted_total", "source"); !slices.Equal(got, []string{"api", "workflow"}) {
		t.Errorf("sources = %v, want [api workflow]", got)
	}
}

func TestMetricsFoldLabels(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	m := telemetry.NewMetrics(reg, testLabels)

	m.EventAccepted("build", telemetry.SourceAPI)
	m.EventAccepted("prod/web", "github")                             // a resource name is never a label
	m.EventAccepted("deploy", "0190f0d2-1b7c-7000-8000-000000000000") // nor an id
	m.EventRejected("", converge.EMALFORMED)
	m.EventRejected("build", "pq: deadlock detected")
	m.RunsSuperseded("deploy", 3)
	m.RunsSuperseded("deploy", 0)
	m.AttemptFinished("build", converge.OutcomeTransientError, 1500*time.Millisecond)
	m.AttemptFinished("nope", "exploded", time.Second)
	m.QueueLag("deploy", -time.Second)
	m.WorkflowRunStatusChanged("release", "succeeded")
	m.WorkflowRunStatusChanged("release/prod/web", "skipped")
	m.DeliveryReceived("gitlab", "accepted")
	m.DeliveryReceived("github", "bogus")
	m.NotificationFinished("sent")
	m.NotificationFinished("timeout")
	m.RowsPruned("runs", 250)
	m.RowsPruned("converge_tokens", 1)
	m.AttemptFenced("build")
	m.AttemptFenced("app/web")
	m.WorkerPolled(time.Unix(1700000000, 500_000_000))
	m.BatchFellBack()

	got := scrape(t, reg)
	tests := []struct {
		name   string
		labels []string
		want   float64
	}{
		{"converge_events_accepted_total", []string{"kind", "build", "source", "api"}, 1},
		{"converge_events_accepted_total", []string{"kind", "unknown", "source", "github"}, 1},
		{"converge_events_accepted_total", []string{"kind", "deploy", "source", "unknown"}, 1},
		{"converge_events_rejected_total", []string{"kind", "unknown", "reason", "malformed-json"}, 1},
		{"converge_events_rejected_total", []string{"kind", "build", "reason", "other"}, 1},
		{"converge_runs_superseded_total", []string{"kind", "deploy"}, 3},
		{"converge_attempts_total", []string{"kind", "build", "outcome", "transient_error"}, 1},
		{"converge_attempts_total", []string{"kind", "unknown", "outcome", "other"}, 1},
		{"converge_attempt_duration_seconds", []string{"kind", "build"}, 1},
		{"converge_attempt_duration_seconds", []string{"kind", "unknown"}, 1},
		{"converge_queue_lag_seconds", []string{"kind", "deploy"}, 1},
		{"converge_workflow_runs_total", []string{"workflow", "release", "status", "succeeded"}, 1},
		{"converge_workflow_runs_total", []string{"workflow", "unknown", "status", "other"}, 1},
		{"converge_deliveries_total", []string{"source", "unknown", "status", "accepted"}, 1},
		{"converge_deliveries_total", []string{"source", "github", "status", "other"}, 1},
		{"converge_notifications_total", []string{"outcome", "sent"}, 1},
		{"converge_notifications_total", []string{"outcome", "other"}, 1},
		{"converge_pruned_rows_total", []string{"table", "runs"}, 250},
		{"converge_pruned_rows_total", []string{"table", "other"}, 1},
		{"converge_attempts_fenced_total", []string{"kind", "build"}, 1},
		{"converge_attempts_fenced_total", []string{"kind", "unknown"}, 1},
		{"converge_worker_last_poll_timestamp_seconds", nil, 1700000000.5},
		{"converge_batch_fallbacks_total", nil, 1},
	}
	for _, tt := range tests {
		v, ok := got.value(tt.name, tt.labels...)
		if !ok || v != tt.want {
			t.Errorf("%s%v = %v (exported: %v), want %v", tt.name, tt.labels, v, ok, tt.want)
		}
	}
	if s := got.sum("converge_queue_lag_seconds", "kind", "deploy"); s != 0 {
		t.Errorf("queue lag sum = %v, want 0 (a negative lag counts as 0)", s)
	}
	if s := got.sum("converge_attempt_duration_seconds", "kind", "build"); s != 1.5 {
		t.Errorf("attempt duration sum = %v, want 1.5", s)
	}

	// Only the fixed values: configured names, the spec's sets, unknown, other.
	allowed := []string{"build", "deploy", "release", "github", "api", "workflow", "unknown", "other"}
	for _, set := range [][]string{telemetry.RejectReasons, telemetry.AttemptOutcomes, telemetry.WorkflowRunStatuses,
		telemetry.DeliveryStatuses, telemetry.NotificationOutcomes, telemetry.PrunedTables} {
		allowed = append(allowed, set...)
	}
	for _, s := range got.samples {
		for name, v := range s.labels {
			if name != "le" && !slices.Contains(allowed, v) {
				t.Errorf("%s has label %s=%q, outside the fixed sets", s.name, name, v)
			}
		}
	}
}

func TestNilMetricsRecordsNothing(t *testing.T) {
	t.Parallel()
	var m *telemetry.Metrics
	m.EventAccepted("build", "api")
	m.EventRejected("build", converge.EINVALID)
	m.RunsSuperseded("build", 1)
	m.AttemptFinished("build", converge.OutcomeSucceeded, time.Second)
	m.QueueLag("build", time.Second)
	m.WorkflowRunStatusChanged("release", "running")
	m.DeliveryReceived("github", "accepted")
	m.NotificationFinished("sent")
	m.RowsPruned("runs", 1)
	m.AttemptFenced("build")
	m.WorkerPolled(time.Now())
	m.BatchFellBack()
}
