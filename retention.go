package converge

import "time"

// Retention says how long finished work is kept (SPEC §13). A zero age
// keeps that kind of row forever.
type Retention struct {
	// Runs is how long an event is kept after every run of it finished
	// (with its runs, attempts and dead letters).
	Runs time.Duration
	// DeadLetters is how long a resolved dead letter (and so its event) is
	// kept after its resolution.
	DeadLetters time.Duration
	// WorkflowRuns is how long a final workflow run (with its steps) is
	// kept after it finished.
	WorkflowRuns time.Duration
	// Deliveries is how long a source's delivery is kept after it arrived.
	Deliveries time.Duration
	// Audit is how long an audit entry is kept.
	Audit time.Duration
	// Interval is how often the periodic pruning pass runs (0: never; a
	// pass can still be run with `converge prune`).
	Interval time.Duration
}

// Retention defaults (SPEC §13); WorkflowRuns defaults to Runs.
const (
	DefaultRetainRuns        = 30 * 24 * time.Hour
	DefaultRetainDeadLetters = 90 * 24 * time.Hour
	DefaultRetainDeliveries  = 7 * 24 * time.Hour
	DefaultRetainAudit       = 400 * 24 * time.Hour
	DefaultPruneInterval     = 10 * time.Minute
)

// PruneTables are the tables a pruning pass deletes from, in the order its
// counts are reported: the values of converge_pruned_rows_total's table
// label, and workflow_steps (deleted with their workflow runs).
var PruneTables = []string{"events", "runs", "attempts", "dead_letters", "workflow_runs", "workflow_steps", "deliveries", "audit"}

// PruneResult is what a pruning pass deleted (or, for a dry run, would
// delete): rows by table (every one of PruneTables, at zero too).
type PruneResult struct {
	DryRun  bool             `json:"dry_run"`
	Deleted map[string]int64 `json:"deleted"`
	// Batches is how many transactions deleted rows.
	Batches int `json:"batches"`
	// Total is the sum of Deleted.
	Total int64 `json:"total"`
}

// NewPruneResult returns a result with every table at zero.
func NewPruneResult(dryRun bool) *PruneResult {
	r := &PruneResult{DryRun: dryRun, Deleted: make(map[string]int64, len(PruneTables))}
	for _, t := range PruneTables {
		r.Deleted[t] = 0
	}
	return r
}

// Add counts n more rows of table.
func (r *PruneResult) Add(table string, n int64) {
	r.Deleted[table] += n
	r.Total += n
}
