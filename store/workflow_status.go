package store

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Counting workflow runs entering a final status (or failed), for
// converge_workflow_runs_total. Triggers make most of these changes, in
// the transactions of step finishes, accepts that supersede a step, dead
// letter discards, cancels of workflow runs and of step runs, rejects of
// held steps, and begins that fail a step whose last attempt's worker
// vanished (after the reconciler's rescue); the trigger of migration 000011 notes each
// in a transaction-local setting, and the transactions that can make them
// read it before committing (workflowStatusesTx) and report it to the
// observer after the commit (so a rolled-back or retried transaction
// counts nothing).

// workflowStatus is a workflow run of workflow entering status.
type workflowStatus struct {
	workflow, status string
}

// workflowStatusesSQL reads what the trigger noted in this transaction.
const workflowStatusesSQL = `SELECT coalesce(current_setting('converge.workflow_statuses', true), '')`

// ObserveWorkflowRuns sets f to be called, after each commit, for every
// workflow run the committed transaction moved to succeeded, failed,
// superseded or cancelled (cmd passes telemetry's
// Metrics.WorkflowRunStatusChanged). Set it once, before the store is
// used.
func (s *Store) ObserveWorkflowRuns(f func(workflow, status string)) { s.workflowObserver = f }

// workflowStatusesTx returns the workflow run statuses tx has entered so
// far (none when no observer is set, without asking the database).
func (s *Store) workflowStatusesTx(ctx context.Context, tx pgx.Tx) ([]workflowStatus, error) {
	if s.workflowObserver == nil {
		return nil, nil
	}
	var noted string
	if err := tx.QueryRow(ctx, workflowStatusesSQL).Scan(&noted); err != nil {
		return nil, fmt.Errorf("read workflow run statuses: %w", err)
	}
	var out []workflowStatus
	for line := range strings.SplitSeq(noted, "\n") {
		if w, st, ok := strings.Cut(line, " "); ok {
			out = append(out, workflowStatus{w, st})
		}
	}
	return out, nil
}

// reportWorkflowStatuses hands the statuses of a committed transaction to
// the observer.
func (s *Store) reportWorkflowStatuses(sts []workflowStatus) {
	for _, st := range sts {
		s.workflowObserver(st.workflow, st.status)
	}
}
