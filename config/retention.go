package config

import (
	"fmt"
	"time"

	"github.com/converge-run/converge"
)

// Retention is the retention: block (SPEC §13): how long finished work is
// kept. Every age accepts days ("30d", "1d12h"); 0 keeps forever. A key
// left out takes its default (workflow_runs: the value of runs).
type Retention struct {
	Runs         *Duration `yaml:"runs"`
	DeadLetters  *Duration `yaml:"dead_letters"`
	WorkflowRuns *Duration `yaml:"workflow_runs"`
	Deliveries   *Duration `yaml:"deliveries"`
	Audit        *Duration `yaml:"audit"`
	// Interval is how often the periodic pruning job runs; 0 turns it off
	// (`converge prune` still runs a pass).
	Interval *Duration `yaml:"interval"`
}

// MinPruneInterval is the shortest retention.interval: durations accept
// milliseconds so that tests can run fast (SPEC §6), and River's periodic
// enqueuer, which starts the pass, looks 100ms ahead of its timer. Under a
// second the pass still runs at most once a second (River's uniqueness
// period has a 1s floor: jobs.prunePeriodicJob).
const MinPruneInterval = 100 * time.Millisecond

// finish fills the defaults and refuses negative ages and an interval
// below MinPruneInterval, naming the key.
func (r *Retention) finish() error {
	fill := func(d **Duration, def time.Duration) {
		if *d == nil {
			v := Duration(def)
			*d = &v
		}
	}
	fill(&r.Runs, converge.DefaultRetainRuns)
	fill(&r.DeadLetters, converge.DefaultRetainDeadLetters)
	fill(&r.WorkflowRuns, r.Runs.Std())
	fill(&r.Deliveries, converge.DefaultRetainDeliveries)
	fill(&r.Audit, converge.DefaultRetainAudit)
	fill(&r.Interval, converge.DefaultPruneInterval)
	for _, age := range []struct {
		key string
		d   *Duration
	}{{"runs", r.Runs}, {"dead_letters", r.DeadLetters}, {"workflow_runs", r.WorkflowRuns},
		{"deliveries", r.Deliveries}, {"audit", r.Audit}} {
		if *age.d < 0 {
			return &KeyError{"retention." + age.key, "must not be negative (0 keeps forever)"}
		}
	}
	if *r.Interval < 0 || (*r.Interval > 0 && r.Interval.Std() < MinPruneInterval) {
		return &KeyError{"retention.interval", fmt.Sprintf("must be 0 (no periodic pruning) or at least %s", MinPruneInterval)}
	}
	return nil
}

// Policy returns the retention as the store and the jobs use it (after
// Finish, which fills every field).
func (r *Retention) Policy() converge.Retention {
	get := func(d *Duration) time.Duration {
		if d == nil {
			return 0
		}
		return d.Std()
	}
	return converge.Retention{Runs: get(r.Runs), DeadLetters: get(r.DeadLetters), WorkflowRuns: get(r.WorkflowRuns),
		Deliveries: get(r.Deliveries), Audit: get(r.Audit), Interval: get(r.Interval)}
}
