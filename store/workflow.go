package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/converge-run/converge"
)

// A workflow run's life in the database. Starting one writes the run, its
// steps (each with its kind's run policy, so that a later step needs no
// configuration) and accepts the root steps, in one transaction. A step is
// accepted when its last need succeeds, in the transaction of that success
// (workflowAdvance, called by AttemptFinish). Steps ending failed,
// superseded or cancelled, and a step's dead letter being redriven,
// discarded or superseded, move the workflow run through triggers
// (migration 000006), whichever path ends them.

// StepPolicy is the run policy a step's event is accepted with.
type StepPolicy struct {
	MaxAttempts     int
	Debounce        time.Duration
	QuarantineAfter int
}

// stepHold is the hold of a step's run when it is accepted: approval for a
// step with approval (SPEC §11).
func stepHold(approval bool) []string {
	if approval {
		return []string{converge.HoldApproval}
	}
	return nil
}

// WorkflowRunStartParams is a workflow run to start: the workflow's
// definition, what was asked, and the run policy of each kind.
type WorkflowRunStartParams struct {
	converge.WorkflowRunStart
	Definition *converge.Workflow
	Policies   map[string]StepPolicy
	// TraceParent is the W3C traceparent of the start's span, kept with
	// the workflow run and given to every step's run (the roots now, the
	// later steps when their needs succeed): one workflow run is one trace.
	TraceParent string
}

// WorkflowRunStartResult is the outcome of starting a workflow run.
type WorkflowRunStartResult struct {
	WorkflowRun *converge.WorkflowRun
	// Replay is true when the workflow run had been started before with an
	// equal payload; nothing was changed.
	Replay bool
}

// WorkflowRunStart starts a workflow run: its row, its steps and the events
// of its root steps, in one transaction. A replay of a started run with an
// equal payload returns it with Replay set. A version at or below the
// highest started for the workflow and resource, or at or below the latest
// accepted version of a root step's stream, fails with ESTALEVERSION (or
// EVERSIONCONFLICT for the same version with another payload) and writes
// nothing. A step resolving to an invalid resource key is EINVALID naming
// resource.
func (s *Store) WorkflowRunStart(ctx context.Context, p WorkflowRunStartParams) (*WorkflowRunStartResult, error) {
	def := p.Definition
	resources, err := workflowResources(p)
	if err != nil {
		return nil, err
	}
	if len(p.Payload) == 0 {
		p.Payload = json.RawMessage(`{}`)
	}
	var res *WorkflowRunStartResult
	var wfs []workflowStatus
	var tally acceptTally
	// Accepting the roots supersedes older step runs, whose triggers lock
	// their workflow runs: a deadlock is run again (inTxRetry).
	err = s.inTxRetry(ctx, func(tx pgx.Tx) error {
		wfs, tally = nil, acceptTally{} // of a try that failed
		var err error
		res, err = s.workflowRunStartTx(ctx, tx, &tally, p, resources)
		if err == nil && !res.Replay { // older workflow runs superseded
			wfs, err = s.workflowStatusesTx(ctx, tx)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("start workflow %s %s@%d: %w", def.Name, p.Resource, p.Version, err)
	}
	s.reportWorkflowStatuses(wfs)
	s.reportAccepts(&tally)
	return res, nil
}

// workflowResources resolves the stream of each step of p's workflow for
// p's resource: EINVALID naming resource when one is not a valid key, or
// two steps resolve to one stream (converge.Workflow.StepResources).
func workflowResources(p WorkflowRunStartParams) (map[string]string, error) {
	resources, err := p.Definition.StepResources(p.Resource)
	if err != nil {
		return nil, &converge.AppError{Code: converge.EINVALID, Message: "resource: " + err.Error(),
			Fields: []converge.FieldError{{Field: "resource", Message: err.Error()}}}
	}
	return resources, nil
}

// lockWorkflowSQL serializes the starts of one workflow and resource, so
// that the replay and stale checks of a start hold until commit.
const lockWorkflowSQL = `SELECT pg_advisory_xact_lock(hashtextextended('converge_workflow_run:' || $1 || ':' || $2, 0))`

// workflowRunStartTx is WorkflowRunStart in tx, with the steps' streams
// resolved: also the path of a source delivery's workflow rule. The runs
// its roots supersede are noted in t. On an error it may have written
// rows and noted them: the caller rolls tx (or a savepoint, and t) back.
func (s *Store) workflowRunStartTx(ctx context.Context, tx pgx.Tx, t *acceptTally, p WorkflowRunStartParams,
	resources map[string]string) (*WorkflowRunStartResult, error) {
	def := p.Definition
	var res *WorkflowRunStartResult
	err := func() error {
		if _, err := tx.Exec(ctx, lockWorkflowSQL, def.Name, p.Resource); err != nil {
			return fmt.Errorf("lock workflow %s %s: %w", def.Name, p.Resource, err)
		}
		var id uuid.UUID
		var equal bool
		err := tx.QueryRow(ctx, `SELECT id, payload = $4::jsonb FROM converge_workflow_runs
			WHERE workflow = $1 AND resource = $2 AND version = $3`, def.Name, p.Resource, p.Version, []byte(p.Payload)).Scan(&id, &equal)
		found := err == nil
		switch {
		case found && equal:
			w, err := workflowRunGet(ctx, tx, id)
			if err != nil {
				return err
			}
			res = &WorkflowRunStartResult{WorkflowRun: w, Replay: true}
			return nil
		case !found && !errors.Is(err, pgx.ErrNoRows):
			return fmt.Errorf("look up workflow run: %w", payloadError(err))
		}
		var highest *int64
		if err := tx.QueryRow(ctx, `SELECT max(version) FROM converge_workflow_runs WHERE workflow = $1 AND resource = $2`,
			def.Name, p.Resource).Scan(&highest); err != nil {
			return fmt.Errorf("look up workflow runs: %w", err)
		}
		// As for an event (G5, planOld): another payload at the highest
		// version is a conflict; below it, a started version is stale like
		// any other.
		if highest != nil && *highest > p.Version {
			e := converge.Errorf(converge.ESTALEVERSION,
				"version %d of workflow %s for %s is below the highest started version %d", p.Version, def.Name, p.Resource, *highest)
			e.LatestVersion = highest
			return e
		}
		if found {
			return converge.Errorf(converge.EVERSIONCONFLICT,
				"version %d of workflow %s for %s was started with a different payload", p.Version, def.Name, p.Resource)
		}

		// Write the run and its steps, then accept the roots in the lock
		// order of their streams. A root whose stream is at or past the
		// version fails the whole start (the transaction rolls back).
		wid := newID()
		if _, err := tx.Exec(ctx, `INSERT INTO converge_workflow_runs (id, workflow, resource, version, payload, status, trace_parent)
			VALUES ($1, $2, $3, $4, $5, 'running', nullif($6, ''))`, wid, def.Name, p.Resource, p.Version, []byte(p.Payload), p.TraceParent); err != nil {
			return fmt.Errorf("insert workflow run: %w", payloadError(err))
		}
		var b pgx.Batch
		for i, st := range def.Steps {
			pol := p.Policies[st.Kind]
			needs := st.Needs
			if needs == nil {
				needs = []string{}
			}
			b.Queue(`INSERT INTO converge_workflow_steps (workflow_run_id, name, position, kind, resource, needs, state, max_attempts, debounce_us,
					approval, quarantine_after)
				VALUES ($1, $2, $3, $4, $5, $6, 'pending', $7, $8, $9, $10)`,
				wid, st.Name, i, st.Kind, resources[st.Name], needs, pol.MaxAttempts, pol.Debounce.Microseconds(), st.Approval, pol.QuarantineAfter)
		}
		if err := tx.SendBatch(ctx, &b).Close(); err != nil {
			return fmt.Errorf("insert workflow steps: %w", err)
		}
		roots := def.Roots()
		slices.SortFunc(roots, func(a, b *converge.WorkflowStep) int {
			return compareStreams(a.Kind, resources[a.Name], b.Kind, resources[b.Name])
		})
		for _, st := range roots {
			payload, err := converge.StepPayload(p.Payload, nil)
			if err != nil {
				return fmt.Errorf("step payload: %w", err)
			}
			pol := p.Policies[st.Kind]
			acc, err := s.eventAcceptTx(ctx, tx, t, EventAcceptParams{
				EventSubmission: converge.EventSubmission{Kind: st.Kind, Resource: resources[st.Name], Version: p.Version, Payload: payload},
				MaxAttempts:     pol.MaxAttempts, Debounce: pol.Debounce, WorkflowRunID: &wid,
				Hold: stepHold(st.Approval), QuarantineAfter: pol.QuarantineAfter, TraceParent: p.TraceParent,
			})
			var appErr *converge.AppError
			switch {
			case err == nil && acc.Replay, errors.As(err, &appErr) && (appErr.Code == converge.ESTALEVERSION || appErr.Code == converge.EVERSIONCONFLICT):
				var latest int64
				if err := tx.QueryRow(ctx, `SELECT latest_version FROM converge_streams WHERE kind = $1 AND resource = $2`,
					st.Kind, resources[st.Name]).Scan(&latest); err != nil {
					return fmt.Errorf("read stream: %w", err)
				}
				e := converge.Errorf(converge.ESTALEVERSION,
					"step %s: version %d of %s %s is not above the latest accepted version %d", st.Name, p.Version, st.Kind, resources[st.Name], latest)
				e.LatestVersion = &latest
				return e
			case err != nil:
				return fmt.Errorf("accept step %s: %w", st.Name, err)
			}
			if _, err := tx.Exec(ctx, `UPDATE converge_workflow_steps SET state = 'accepted', event_id = $3
				WHERE workflow_run_id = $1 AND name = $2`, wid, st.Name, acc.Event.ID); err != nil {
				return fmt.Errorf("mark step %s accepted: %w", st.Name, err)
			}
		}
		w, err := workflowRunGet(ctx, tx, wid)
		if err != nil {
			return err
		}
		res = &WorkflowRunStartResult{WorkflowRun: w}
		return nil
	}()
	return res, err
}

// compareStreams orders streams as the lock order does (bytewise kind,
// then resource).
func compareStreams(k1, r1, k2, r2 string) int {
	if k1 != k2 {
		if k1 < k2 {
			return -1
		}
		return 1
	}
	switch {
	case r1 < r2:
		return -1
	case r1 > r2:
		return 1
	}
	return 0
}

// workflowStepRow is a step of a workflow run as workflowAdvance reads it.
type workflowStepRow struct {
	name, kind, resource string
	needs                []string
	state                string
	maxAttempts          int
	debounceUS           int64
	approval             bool
	quarantineAfter      int
	status               *converge.RunStatus // its event's latest run's
	output               json.RawMessage
}

// workflowAdvance moves workflow run id on after one of its steps'
// runs succeeded, in that success's transaction: every pending step whose
// needs have all succeeded is accepted now, at the workflow run's version,
// with its needs' outputs; a step whose stream is already at or past that
// version is not accepted and ends its workflow run superseded; when every
// step succeeded the workflow run succeeds. A final workflow run is left
// alone (its steps run on as plain events), and so is one that was pruned.
// The steps it accepts, and the runs they supersede, are noted in t.
func (s *Store) workflowAdvance(ctx context.Context, tx pgx.Tx, t *acceptTally, id uuid.UUID) error {
	var version int64
	var payload json.RawMessage
	var finished *time.Time
	var traceParent string
	err := tx.QueryRow(ctx, `SELECT version, payload, finished_at, coalesce(trace_parent, '') FROM converge_workflow_runs WHERE id = $1 FOR UPDATE`, id).
		Scan(&version, &payload, &finished, &traceParent)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil // pruned, so final: its steps run on as plain events
	}
	if err != nil {
		return fmt.Errorf("lock workflow run %s: %w", id, err)
	}
	if finished != nil {
		return nil
	}
	rows, err := tx.Query(ctx, `SELECT st.name, st.kind, st.resource, st.needs, st.state, st.max_attempts, st.debounce_us, st.approval, st.quarantine_after, lr.status, lr.output
		FROM converge_workflow_steps st
		LEFT JOIN LATERAL (SELECT r.status, r.output FROM converge_runs r WHERE r.event_id = st.event_id
		                   ORDER BY r.number DESC LIMIT 1) lr ON true
		WHERE st.workflow_run_id = $1 ORDER BY st.position`, id)
	if err != nil {
		return fmt.Errorf("read workflow steps: %w", err)
	}
	steps, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*workflowStepRow, error) {
		var st workflowStepRow
		var output []byte
		err := row.Scan(&st.name, &st.kind, &st.resource, &st.needs, &st.state, &st.maxAttempts, &st.debounceUS, &st.approval, &st.quarantineAfter, &st.status, &output)
		if output != nil {
			st.output = output
		}
		return &st, err
	})
	if err != nil {
		return fmt.Errorf("read workflow steps: %w", err)
	}
	succeeded := map[string]*workflowStepRow{}
	for _, st := range steps {
		if st.status != nil && *st.status == converge.RunSucceeded {
			succeeded[st.name] = st
		}
	}
	if len(succeeded) == len(steps) {
		if _, err := tx.Exec(ctx, `UPDATE converge_workflow_runs SET status = 'succeeded', finished_at = now() WHERE id = $1`, id); err != nil {
			return fmt.Errorf("mark workflow run succeeded: %w", err)
		}
		return nil
	}
	var ready []*workflowStepRow
	for _, st := range steps {
		if st.state == "pending" && allIn(st.needs, succeeded) {
			ready = append(ready, st)
		}
	}
	// They are accepted in the lock order of their streams, which every
	// transaction that takes several streams follows (a begin batch takes
	// canary/x before staging/x whatever order the steps are listed in).
	slices.SortStableFunc(ready, func(a, b *workflowStepRow) int { return compareStreams(a.kind, a.resource, b.kind, b.resource) })
	if len(ready) > 1 {
		// Steps that become ready together are accepted all or none: when
		// one's stream is already at or past the version, the workflow run
		// ends superseded before any sibling is accepted, whatever the
		// steps' order (its siblings end skipped, never run as plain
		// events of a workflow run that ended in the same transaction).
		ahead, err := streamsAhead(ctx, tx, ready, version)
		if err != nil {
			return err
		}
		for _, st := range ready {
			if ahead[[2]string{st.kind, st.resource}] {
				return stepSupersede(ctx, tx, id, st.name)
			}
		}
	}
	for _, st := range ready {
		outputs := make(map[string]json.RawMessage, len(st.needs))
		for _, n := range st.needs {
			outputs[n] = succeeded[n].output
		}
		stepPayload, err := converge.StepPayload(payload, outputs)
		if err != nil {
			return fmt.Errorf("step payload: %w", err)
		}
		acc, err := s.eventAcceptTx(ctx, tx, t, EventAcceptParams{
			EventSubmission: converge.EventSubmission{Kind: st.kind, Resource: st.resource, Version: version, Payload: stepPayload},
			MaxAttempts:     st.maxAttempts, Debounce: time.Duration(st.debounceUS) * time.Microsecond, WorkflowRunID: &id,
			Hold: stepHold(st.approval), QuarantineAfter: st.quarantineAfter, TraceParent: traceParent,
		})
		var appErr *converge.AppError
		if err == nil && acc.Replay || errors.As(err, &appErr) && (appErr.Code == converge.ESTALEVERSION || appErr.Code == converge.EVERSIONCONFLICT) {
			// The stream is past this version (an accept of it since
			// streamsAhead looked, or the only step ready).
			return stepSupersede(ctx, tx, id, st.name)
		}
		if err != nil {
			return fmt.Errorf("accept step %s: %w", st.name, err)
		}
		t.step(st.kind)
		if _, err := tx.Exec(ctx, `UPDATE converge_workflow_steps SET state = 'accepted', event_id = $3
			WHERE workflow_run_id = $1 AND name = $2`, id, st.name, acc.Event.ID); err != nil {
			return fmt.Errorf("mark step %s accepted: %w", st.name, err)
		}
		// Accepting the step may have superseded an older run of its
		// stream, and through the trigger ended this very workflow run
		// (when the older run was one of its own steps'): stop then.
		if err := tx.QueryRow(ctx, `SELECT finished_at FROM converge_workflow_runs WHERE id = $1`, id).Scan(&finished); err != nil {
			return fmt.Errorf("read workflow run: %w", err)
		}
		if finished != nil {
			return nil
		}
	}
	return nil
}

// stepSupersede ends step name of workflow run id superseded without
// accepting it (its stream is already at or past the workflow run's
// version), and with it the workflow run: the steps behind it, and those
// not accepted yet, end skipped.
func stepSupersede(ctx context.Context, tx pgx.Tx, id uuid.UUID, name string) error {
	if _, err := tx.Exec(ctx, `UPDATE converge_workflow_steps SET state = 'superseded' WHERE workflow_run_id = $1 AND name = $2`,
		id, name); err != nil {
		return fmt.Errorf("mark step %s superseded: %w", name, err)
	}
	if _, err := tx.Exec(ctx, `SELECT converge_workflow_run_end($1, 'superseded')`, id); err != nil {
		return fmt.Errorf("end workflow run superseded: %w", err)
	}
	return nil
}

// streamsAhead returns the streams of steps that have already accepted
// version or a higher one, keyed by kind and resource. It reads without
// locks: an accept that raises a stream after it looked is caught by the
// step's own accept, which takes the stream's lock.
func streamsAhead(ctx context.Context, tx pgx.Tx, steps []*workflowStepRow, version int64) (map[[2]string]bool, error) {
	kinds, resources := make([]string, len(steps)), make([]string, len(steps))
	for i, st := range steps {
		kinds[i], resources[i] = st.kind, st.resource
	}
	rows, err := tx.Query(ctx, `SELECT s.kind, s.resource FROM converge_streams s
		JOIN unnest($1::text[], $2::text[]) AS r(kind, resource) ON s.kind = r.kind AND s.resource = r.resource
		WHERE s.latest_version >= $3`, kinds, resources, version)
	if err != nil {
		return nil, fmt.Errorf("read the steps' streams: %w", err)
	}
	ahead := map[[2]string]bool{}
	for rows.Next() {
		var k [2]string
		if err := rows.Scan(&k[0], &k[1]); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read the steps' streams: %w", err)
		}
		ahead[k] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the steps' streams: %w", err)
	}
	return ahead, nil
}

// allIn reports whether every name is a key of m.
func allIn[V any](names []string, m map[string]V) bool {
	for _, n := range names {
		if _, ok := m[n]; !ok {
			return false
		}
	}
	return true
}

// errStepsMoved is WorkflowRunCancel finding, once it holds the workflow
// run's lock, a step run that its first statement did not lock: a step's
// finish accepted it (workflowAdvance) and committed while the cancel
// waited for that step's run row.
var errStepsMoved = errors.New("a step run was accepted while the cancel waited for its workflow run")

// workflowCancelTries is how many times WorkflowRunCancel starts again
// after errStepsMoved; each try sees the steps accepted before it, and a
// workflow run has a bounded number of steps.
const workflowCancelTries = 10

// WorkflowRunCancel cancels a workflow run on an operator's request: every
// non-terminal step run ends cancelled (a running attempt's worker notices
// and stops the call; their jobs are cancelled), pending steps are skipped
// and the workflow run ends cancelled, in one transaction with its audit
// entry. It returns ErrRunFinished when the workflow run is final.
//
// The step runs are locked before the workflow run, as a step's finish
// takes them. A finish holding a step's run row may accept the next steps
// (new rows, outside the first statement's snapshot) and commit while the
// cancel waits for that row; once the cancel holds the workflow run, which
// every such finish locks, the unfinished step runs are read again, and a
// run not locked yet makes the cancel start over in a new transaction
// (locking it then would take the two rows out of order), so that no step
// accepted before the cancel runs on after it.
func (s *Store) WorkflowRunCancel(ctx context.Context, id uuid.UUID, audit converge.AuditEntry) (*converge.WorkflowRun, error) {
	for try := 1; ; try++ {
		w, err := s.workflowRunCancel(ctx, id, audit)
		if errors.Is(err, errStepsMoved) && try < workflowCancelTries {
			continue
		}
		return w, err
	}
}

func (s *Store) workflowRunCancel(ctx context.Context, id uuid.UUID, audit converge.AuditEntry) (*converge.WorkflowRun, error) {
	var w *converge.WorkflowRun
	var wfs []workflowStatus
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		// The step runs first, then the workflow run: the order in which
		// a step's finish takes them.
		rows, err := tx.Query(ctx, `SELECT id, job_id FROM converge_runs WHERE workflow_run_id = $1 AND finished_at IS NULL
			ORDER BY id FOR UPDATE`, id)
		if err != nil {
			return fmt.Errorf("lock step runs: %w", err)
		}
		type stepRun struct {
			id  uuid.UUID
			job *int64
		}
		runs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (stepRun, error) {
			var r stepRun
			return r, row.Scan(&r.id, &r.job)
		})
		if err != nil {
			return fmt.Errorf("lock step runs: %w", err)
		}
		locked := make([]uuid.UUID, len(runs))
		for i, r := range runs {
			locked[i] = r.id
		}
		var finished *time.Time
		err = tx.QueryRow(ctx, `SELECT finished_at FROM converge_workflow_runs WHERE id = $1 FOR UPDATE`, id).Scan(&finished)
		if errors.Is(err, pgx.ErrNoRows) {
			return converge.ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("lock workflow run: %w", err)
		}
		if finished != nil {
			return ErrRunFinished
		}
		var unlocked bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM converge_runs WHERE workflow_run_id = $1 AND finished_at IS NULL
			AND id <> ALL ($2::uuid[]))`, id, locked).Scan(&unlocked); err != nil {
			return fmt.Errorf("read step runs again: %w", err)
		}
		if unlocked {
			return errStepsMoved
		}
		if _, err := tx.Exec(ctx, `SELECT converge_workflow_run_end($1, 'cancelled')`, id); err != nil {
			return fmt.Errorf("end workflow run: %w", err)
		}
		for _, r := range runs {
			if _, err := tx.Exec(ctx, `UPDATE converge_runs SET status = 'cancelled', finished_at = now(), next_attempt_at = NULL
				WHERE id = $1`, r.id); err != nil {
				return fmt.Errorf("cancel run %s: %w", r.id, err)
			}
			if r.job != nil {
				if err := s.jobCancel(ctx, tx, *r.job); err != nil {
					return err
				}
			}
		}
		audit.Action = "workflow_run.cancel"
		audit.Targets = []string{id.String()}
		if err := auditInsert(ctx, tx, audit); err != nil {
			return err
		}
		w, err = workflowRunGet(ctx, tx, id)
		if err == nil {
			wfs, err = s.workflowStatusesTx(ctx, tx)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("cancel workflow run %s: %w", id, err)
	}
	s.reportWorkflowStatuses(wfs)
	return w, nil
}
