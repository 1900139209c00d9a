package store

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Counting workflow runs entering a status, for
// converge_workflow_runs_total. Triggers make most of these changes, in
// the transactions of workflow run starts, step finishes (a next step held
// for approval: waiting), accepts that supersede a step, dead letter
// redrives and discards, approvals, quarantine releases, cancels of
// workflow runs and of step runs, rejects of held steps, and begins that
// fail a step whose last attempt's worker vanished (after the reconciler's
// rescue); the trigger of migrations 000011 and 000018 notes each insert
// and change of status in a transaction-local setting, and the
// transactions that can make them read it before committing
// (workflowStatusesTx) and report it to the observer after the commit (so
// a rolled-back or retried transaction counts nothing).

// workflowStatus is a workflow run of workflow entering status.
type workflowStatus struct {
	workflow, status string
}

// workflowStatusesSQL reads what the trigger noted in this transaction.
const workflowStatusesSQL = `SELECT coalesce(current_setting('converge.workflow_statuses', true), '')`

// ObserveWorkflowRuns sets f to be called, after each commit, for every
// workflow run the committed transaction started or moved to another
// status: running, waiting, succeeded, failed, superseded or cancelled
// (cmd passes telemetry's Metrics.WorkflowRunStatusChanged). Set it once,
// before the store is used.
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
	return workflowStatusesNoted(noted), nil
}

// workflowStatusesNoted reads the trigger's notes, lines of "id old new
// workflow" (old empty for an insert), into the status each workflow run
// entered: where the transaction left it, when that differs from where it
// found it (a run inserted running and then set waiting, because its root
// step is held, entered waiting; one moved waiting -> running -> waiting
// entered nothing).
func workflowStatusesNoted(noted string) []workflowStatus {
	type move struct {
		from, to, workflow string
	}
	var order []string
	moves := map[string]*move{}
	for line := range strings.SplitSeq(noted, "\n") {
		f := strings.SplitN(line, " ", 4)
		if len(f) != 4 {
			continue
		}
		m, ok := moves[f[0]]
		if !ok {
			m = &move{from: f[1], workflow: f[3]}
			moves[f[0]] = m
			order = append(order, f[0])
		}
		m.to = f[2]
	}
	var out []workflowStatus
	for _, id := range order {
		if m := moves[id]; m.to != m.from {
			out = append(out, workflowStatus{m.workflow, m.to})
		}
	}
	return out
}

// reportWorkflowStatuses hands the statuses of a committed transaction to
// the observer.
func (s *Store) reportWorkflowStatuses(sts []workflowStatus) {
	for _, st := range sts {
		s.workflowObserver(st.workflow, st.status)
	}
}
