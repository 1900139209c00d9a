package config_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/config"
)

const day = 24 * time.Hour

func TestRetentionDefaults(t *testing.T) {
	t.Parallel()
	cfg, err := load(t, "", nil)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	want := converge.Retention{Runs: 30 * day, DeadLetters: 90 * day, WorkflowRuns: 30 * day,
		Deliveries: 7 * day, Audit: 400 * day, Interval: 10 * time.Minute}
	if got := cfg.Retention.Policy(); got != want {
		t.Fatalf("default retention = %+v, want %+v", got, want)
	}
}

func TestRetentionValues(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, yaml string
		want       converge.Retention
	}{
		{"days and workflow_runs following runs", "retention: {runs: 2d, dead_letters: 1d12h, deliveries: 36h, audit: 0, interval: 1s}\n",
			converge.Retention{Runs: 2 * day, DeadLetters: day + 12*time.Hour, WorkflowRuns: 2 * day, Deliveries: 36 * time.Hour, Audit: 0, Interval: time.Second}},
		{"workflow_runs of its own, zero keeps forever", "retention: {runs: 0, workflow_runs: 5d, interval: 0}\n",
			converge.Retention{Runs: 0, DeadLetters: 90 * day, WorkflowRuns: 5 * day, Deliveries: 7 * day, Audit: 400 * day, Interval: 0}},
		{"milliseconds for tests", "retention: {runs: 500ms, dead_letters: 500ms}\n",
			converge.Retention{Runs: 500 * time.Millisecond, DeadLetters: 500 * time.Millisecond, WorkflowRuns: 500 * time.Millisecond,
				Deliveries: 7 * day, Audit: 400 * day, Interval: 10 * time.Minute}},
		{"an interval in milliseconds", "retention: {runs: 500ms, interval: 200ms}\n",
			converge.Retention{Runs: 500 * time.Millisecond, DeadLetters: 90 * day, WorkflowRuns: 500 * time.Millisecond,
				Deliveries: 7 * day, Audit: 400 * day, Interval: 200 * time.Millisecond}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := load(t, tc.yaml, nil)
			if err != nil {
				t.Fatalf("load: %v", err)
			}
			if got := cfg.Retention.Policy(); got != tc.want {
				t.Fatalf("retention = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestRetentionInvalid(t *testing.T) {
	t.Parallel()
	cases := []struct{ name, yaml, key string }{
		{"runs negative", "retention: {runs: -1h}\n", "retention.runs"},
		{"dead_letters not a duration", "retention:\n  dead_letters: forever\n", "retention.dead_letters"},
		{"workflow_runs negative", "retention: {workflow_runs: -2d}\n", "retention.workflow_runs"},
		{"deliveries bad days", "retention:\n  deliveries: 3dd\n", "retention.deliveries"},
		{"audit negative", "retention: {audit: -1s}\n", "retention.audit"},
		{"interval too short", "retention: {interval: 10ms}\n", "retention.interval"},
		{"interval negative", "retention: {interval: -1m}\n", "retention.interval"},
		{"unknown key", "retention:\n  events: 1d\n", "retention.events"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := load(t, tc.yaml, nil)
			var ke *config.KeyError
			if !errors.As(err, &ke) || ke.Key != tc.key {
				t.Fatalf("load = %v, want a KeyError naming %s", err, tc.key)
			}
			if !strings.Contains(err.Error(), tc.key) {
				t.Fatalf("error %q does not name %s", err, tc.key)
			}
		})
	}
}
