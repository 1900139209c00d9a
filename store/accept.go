package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/converge-run/converge"
)

// Accepting an event: load (lock the stream, raise its latest version and
// supersede its unfinished runs when the event's version is above it) →
// plan (a fresh version, a replay, a conflict or a stale version; pure) →
// write (the event, its run and the run's job). EventAccept is the path of
// one call, EventAcceptMany of several in one transaction; both share the
// plan functions and the SQL fragments, and TestAcceptBeginFinishDifferential
// holds them to the same rows.

// EventAcceptParams is an event to accept with the run policy of its kind.
type EventAcceptParams struct {
	converge.EventSubmission
	MaxAttempts int
	// Debounce holds back the first attempt of the event's run until this
	// long after its acceptance (SPEC §6), so that a newer version
	// arriving meanwhile supersedes it without a call and a burst of
	// versions costs one (0: at once). A run that is held at acceptance
	// is not held back again when it is released (runUnhold), nor is a
	// redrive's run (runInsert).
	Debounce time.Duration
	// WorkflowRunID makes the event a step of that workflow run (set by
	// the workflow code only; EventAcceptMany refuses it).
	WorkflowRunID *uuid.UUID
	// Hold accepts the run held (SPEC §11): converge.HoldApproval for a
	// workflow step with approval (set by the workflow code only;
	// EventAcceptMany refuses it). A quarantined stream adds
	// converge.HoldQuarantine on either path.
	Hold []string
	// QuarantineAfter is the kind's quarantine_after, kept on the run: the
	// transaction that ends it failed quarantines its stream when it is the
	// QuarantineAfter-th failure in a row (0 = never).
	QuarantineAfter int
	// TraceParent is the W3C traceparent the event's run is created under
	// (the accept's span; a workflow step gets its workflow run's), kept
	// with the run as the parent of its attempt spans; empty when tracing
	// is off.
	TraceParent string
}

// runTrace is the trace context a new run keeps: the traceparent it is
// created under and, for a redrive, the one it links to. Empty strings
// are stored as NULL.
type runTrace struct {
	parent, link string
}

// holdFor is what holds the event's run when its stream is quarantined or
// not: p.Hold, and converge.HoldQuarantine when it is.
func (p EventAcceptParams) holdFor(quarantined bool) []string {
	hold := append([]string{}, p.Hold...)
	if quarantined && !slices.Contains(hold, converge.HoldQuarantine) {
		hold = append(hold, converge.HoldQuarantine)
	}
	return hold
}

// runStatusFor is the status a new run with hold starts in.
func runStatusFor(hold []string) converge.RunStatus {
	if len(hold) > 0 {
		return converge.RunHeld
	}
	return converge.RunQueued
}

// upsertStreamSQL creates the row of a stream seen for the first time
// and, either way, locks it and returns its latest version and whether it
// is quarantined. rows is the source of (kind, resource) pairs.
func upsertStreamSQL(rows, returning string) string {
	return `INSERT INTO converge_streams AS s (kind, resource, latest_version) ` + rows + `
		ON CONFLICT (kind, resource) DO UPDATE SET latest_version = s.latest_version
		RETURNING ` + returning + `latest_version, s.quarantined_at IS NOT NULL`
}

// raiseLatestSet raises a stream's latest version (aliased s) to the
// event's, %[1]s, records when (latest_at), and keeps the start of the
// stream's burst (burst_since) when the version before arrived less than
// the kind's debounce, %[2]s microseconds, ago and no attempt of the
// stream has begun since (beginning one clears it, leaseTakeSet);
// otherwise a burst starts now.
const raiseLatestSet = `latest_version = %[1]s, latest_at = clock_timestamp(),
	burst_since = CASE WHEN s.burst_since IS NOT NULL AND s.latest_at > clock_timestamp() - %[2]s * interval '1 microsecond'
		THEN s.burst_since ELSE clock_timestamp() END`

// BurstMaxDebounces bounds the debounce of a burst (SPEC §6): a new run's
// first attempt is held back its kind's debounce, but never past its
// stream's burst_since plus this many debounces, so that versions arriving
// without end, each less than the debounce after the one before, still
// reach the target at least that often instead of superseding each other
// before any call (a debounce alone would hold the stream back for as long
// as they keep coming).
const BurstMaxDebounces = 20

// debounceLeftSQL is how long, in microseconds, the first attempt of the
// run accepted by a raise (raiseLatestSet) of stream s is held back: the
// debounce %[1]s, cut to what is left of the burst's BurstMaxDebounces
// debounces. It reads s.burst_since as the raise set it (RETURNING).
var debounceLeftSQL = `greatest(least(%[1]s, %[1]s * ` + fmt.Sprint(BurstMaxDebounces) + `
	- (extract(epoch FROM clock_timestamp() - s.burst_since) * 1000000)::bigint), 0)`

// customPlanOn and customPlanOff surround a statement that joins the
// arrays of a batch (unnest) with a table that grows from nothing, so that
// PostgreSQL plans it for its arguments and the table as it is: after a
// prepared statement's fifth run PostgreSQL may cache a generic plan,
// costed with the tables' size at that moment, and keeps it until an
// ANALYZE (never, with autovacuum off) or the connection's end. For the
// accept's raise of the latest versions, a generic plan made on a new
// database is a hash join over a sequential scan of converge_streams: it
// made one connection's accepts walk every stream, and the ingest
// benchmark 2–4 times slower in a third of its runs
// (TestAcceptPlannedForItsTables, docs/benchmarks.md). Only around the
// statement: force_custom_plan for a whole transaction would also re-plan
// every statement of its triggers, row after row.
const (
	customPlanOn  = `SET LOCAL plan_cache_mode = force_custom_plan`
	customPlanOff = `SET LOCAL plan_cache_mode TO DEFAULT`
)

// eventInsertSQL inserts events from rows (id, kind, resource, version,
// payload, workflow run). received_at is read from the clock now, while the stream row is
// locked (now() would be the transaction's start, before the lock): it then
// orders acceptance against attempts of the stream as the lock does, which
// is what the invariant checker relies on.
func eventInsertSQL(rows, returning string) string {
	return `INSERT INTO converge_events (id, kind, resource, version, payload, workflow_run_id, received_at)
		SELECT id, k, r, v, p, w, clock_timestamp() FROM ` + rows + ` RETURNING ` + returning
}

// runInsertSQL inserts first-or-later runs from rows (id, event, number,
// kind, resource, version, max attempts, job, debounce in microseconds,
// workflow run, hold, quarantine_after, trace parent, trace link): held
// when hold is not empty (and then without a job), otherwise queued, and
// held back until the debounce from now when it is above zero. created_at
// is read from the clock, as its event's received_at (eventInsertSQL), so
// a run is never created before its event was received.
func runInsertSQL(rows string) string {
	return `INSERT INTO converge_runs AS r (id, event_id, number, kind, resource, version, status, max_attempts, job_id, next_attempt_at,
			workflow_run_id, hold, quarantine_after, trace_parent, trace_link, created_at)
		SELECT id, e, n, k, rs, v, CASE WHEN cardinality(h) > 0 THEN 'held' ELSE 'queued' END, m, j,
			CASE WHEN d > 0 AND cardinality(h) = 0 THEN clock_timestamp() + d * interval '1 microsecond' END, w, h, qa,
			nullif(tp, ''), nullif(tl, ''), clock_timestamp()
		FROM ` + rows + ` RETURNING ` + runColumns
}

// acceptPlan is what accepting an event above its stream's latest version
// writes: its ids and how long its first attempt is held back.
type acceptPlan struct {
	eventID, runID uuid.UUID
	debounce       time.Duration
}

// planFresh plans the acceptance of a version above its stream's latest:
// its first attempt is held back for debounce, the kind's debounce on a
// quiet stream as in a burst (SPEC §6), cut to what is left of a long
// burst's (debounceLeftSQL, read by the raise).
func planFresh(debounce time.Duration) acceptPlan {
	return acceptPlan{eventID: newID(), runID: newID(), debounce: max(debounce, 0)}
}

// debounceMicros is the kind's debounce of p in microseconds, the
// argument of raiseLatestSet.
func (p EventAcceptParams) debounceMicros() int64 {
	return max(p.Debounce, 0).Microseconds()
}

// EventAccept records an event, its first run and the run's job in one
// transaction, after ending every unfinished run of the stream as
// superseded. A replay of an accepted event with an equal payload returns
// the original with Replay set and changes nothing. A version at or below the
// stream's latest otherwise fails with ESTALEVERSION or EVERSIONCONFLICT.
func (s *Store) EventAccept(ctx context.Context, p EventAcceptParams) (*converge.EventAcceptResult, error) {
	var res *converge.EventAcceptResult
	var wfs []workflowStatus
	var tally acceptTally
	// Superseding a workflow step's run locks its workflow run, outside
	// the lock order of streams: a deadlock with a step's finish is run
	// again (inTxRetry).
	err := s.inTxRetry(ctx, func(tx pgx.Tx) error {
		wfs, tally = nil, acceptTally{} // of a try that failed
		var err error
		res, err = s.eventAcceptTx(ctx, tx, &tally, p)
		if err == nil && len(res.SupersededRuns) > 0 { // a superseded step ends its workflow run
			wfs, err = s.workflowStatusesTx(ctx, tx)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("accept event %s/%s@%d: %w", p.Kind, p.Resource, p.Version, err)
	}
	s.reportWorkflowStatuses(wfs)
	s.reportAccepts(&tally)
	return res, nil
}

// eventAcceptTx is EventAccept in tx: the path of one call, also taken by a
// workflow run's transaction for each step it accepts. The runs it
// supersedes are noted in t.
func (s *Store) eventAcceptTx(ctx context.Context, tx pgx.Tx, t *acceptTally, p EventAcceptParams) (*converge.EventAcceptResult, error) {
	// Load. The upsert locks the stream row for the rest of the
	// transaction: acceptance is serialized per stream. The latest
	// version is raised in the same round trip when the event's is
	// above it.
	var b pgx.Batch
	b.Queue(upsertStreamSQL(`VALUES ($1, $2, 0)`, ""), p.Kind, p.Resource)
	b.Queue(`UPDATE converge_streams s SET `+fmt.Sprintf(raiseLatestSet, "$3", "$4::bigint")+`
		WHERE kind = $1 AND resource = $2 AND latest_version < $3
		RETURNING `+fmt.Sprintf(debounceLeftSQL, "$4::bigint"),
		p.Kind, p.Resource, p.Version, p.debounceMicros())
	br := tx.SendBatch(ctx, &b)
	var latest int64
	var quarantined bool
	err := br.QueryRow().Scan(&latest, &quarantined)
	if err != nil {
		_ = br.Close()
		return nil, fmt.Errorf("lock stream: %w", err)
	}
	var debounceUS int64
	err = br.QueryRow().Scan(&debounceUS)
	raised := err == nil
	if errors.Is(err, pgx.ErrNoRows) { // p.Version <= latest
		err = nil
	}
	if cerr := br.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("raise latest version: %w", err)
	}
	if !raised {
		return s.acceptOld(ctx, tx, p, latest)
	}

	// Plan and write.
	plan := planFresh(time.Duration(debounceUS) * time.Microsecond)
	hold := p.holdFor(quarantined)
	ev := &converge.Event{ID: plan.eventID, Status: runStatusFor(hold)}
	b = pgx.Batch{}
	b.Queue(supersedeStreamSQL, p.Kind, p.Resource)
	b.Queue(eventInsertSQL(`(VALUES ($1::uuid, $2::text, $3::text, $4::bigint, $5::jsonb, $6::uuid)) u(id, k, r, v, p, w)`,
		`kind, resource, version, payload, received_at, workflow_run_id`),
		plan.eventID, p.Kind, p.Resource, p.Version, []byte(p.Payload), p.WorkflowRunID)
	br = tx.SendBatch(ctx, &b)
	superseded, jobs, err := supersededRuns(br)
	if err != nil {
		_ = br.Close()
		return nil, err
	}
	err = br.QueryRow().Scan(&ev.Kind, &ev.Resource, &ev.Version, &ev.Payload, &ev.ReceivedAt, &ev.WorkflowRunID)
	if cerr := br.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("insert event: %w", payloadError(err))
	}
	for _, j := range jobs {
		if err := s.jobCancel(ctx, tx, j); err != nil {
			return nil, err
		}
	}
	ev.ReceivedAt = ev.ReceivedAt.UTC()
	run, err := s.runInsertID(ctx, tx, ev, plan.runID, 1, p.MaxAttempts, plan.debounce, hold, p.QuarantineAfter, runTrace{parent: p.TraceParent})
	if err != nil {
		return nil, err
	}
	t.supersede(p.Kind, len(superseded))
	return &converge.EventAcceptResult{Event: ev, Run: run, SupersededRuns: superseded}, nil
}

// acceptOld answers an event whose version is not above the stream's
// latest: it loads the stored event of that version and plans the answer
// (planOld).
func (s *Store) acceptOld(ctx context.Context, tx pgx.Tx, p EventAcceptParams, latest int64) (*converge.EventAcceptResult, error) {
	var id uuid.UUID
	var equal bool
	err := tx.QueryRow(ctx, `SELECT id, payload = $4::jsonb FROM converge_events
		WHERE kind = $1 AND resource = $2 AND version = $3`, p.Kind, p.Resource, p.Version, []byte(p.Payload)).Scan(&id, &equal)
	found := err == nil
	if errors.Is(err, pgx.ErrNoRows) {
		err = nil
	}
	if err != nil {
		return nil, fmt.Errorf("look up event: %w", payloadError(err))
	}
	if err := planOld(p, latest, found, equal); err != nil {
		return nil, err
	}
	ev, err := s.eventGet(ctx, tx, id, false)
	if err != nil {
		return nil, err
	}
	run, err := scanRun(tx.QueryRow(ctx, `SELECT `+runColumns+` FROM converge_runs r WHERE r.event_id = $1 ORDER BY number DESC LIMIT 1`, id))
	if err != nil {
		return nil, fmt.Errorf("get latest run: %w", err)
	}
	return &converge.EventAcceptResult{Event: ev, Run: run, SupersededRuns: []uuid.UUID{}, Replay: true}, nil
}

// planOld decides the answer to an event whose version is not above the
// stream's latest, given whether that version is stored (found) and with
// an equal payload: nil for a replay, else the error.
func planOld(p EventAcceptParams, latest int64, found, equal bool) error {
	switch {
	case found && equal:
		return nil
	case found && p.Version == latest:
		return converge.Errorf(converge.EVERSIONCONFLICT,
			"version %d of %s %s was accepted with a different payload", p.Version, p.Kind, p.Resource)
	default:
		e := converge.Errorf(converge.ESTALEVERSION,
			"version %d of %s %s is not above the latest accepted version %d", p.Version, p.Kind, p.Resource, latest)
		e.LatestVersion = &latest
		return e
	}
}

// payloadError translates PostgreSQL refusing an event's payload as jsonb
// (a lone UTF-16 surrogate escape, a number beyond numeric's range) into a
// validation error of the payload field, so that such input is a 422 and
// not an internal error (G9). The payload is the only value of the
// statements it wraps that can raise a data exception (SQLSTATE class 22).
func payloadError(err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || !strings.HasPrefix(pgErr.Code, "22") {
		return err
	}
	// PostgreSQL's own text stays out of the answer (SPEC §4: a database
	// error's text never reaches a client).
	msg := "is not storable JSON (a number or a string escape the database cannot hold)"
	return &converge.AppError{Code: converge.EINVALID, Message: "payload: " + msg,
		Fields: []converge.FieldError{{Field: "payload", Message: msg}}}
}

// supersededRuns reads the answer of supersedeStreamSQL, the next result
// of br: the runs superseded and their jobs.
func supersededRuns(br pgx.BatchResults) ([]uuid.UUID, []int64, error) {
	ids := []uuid.UUID{}
	var jobs []int64
	err := scanEach(br, func(row pgx.Rows) error {
		var id uuid.UUID
		var job *int64
		if err := row.Scan(&id, &job); err != nil {
			return err
		}
		ids = append(ids, id)
		if job != nil {
			jobs = append(jobs, *job)
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("supersede runs: %w", err)
	}
	return ids, jobs, nil
}

// runInsert adds run number n of ev, with its job unless hold holds it,
// in tx.
func (s *Store) runInsert(ctx context.Context, tx pgx.Tx, ev *converge.Event, n, maxAttempts int, hold []string, quarantineAfter int,
	trace runTrace) (*converge.Run, error) {
	return s.runInsertID(ctx, tx, ev, newID(), n, maxAttempts, 0, hold, quarantineAfter, trace)
}

// runInsertID is runInsert with the run's id chosen by the caller, and its
// first attempt held back until debounce from now (when above zero). A run
// that hold holds gets no job: it gets one when it is released
// (runUnhold), so that no worker can begin it meanwhile.
func (s *Store) runInsertID(ctx context.Context, tx pgx.Tx, ev *converge.Event, runID uuid.UUID, n, maxAttempts int, debounce time.Duration,
	hold []string, quarantineAfter int, trace runTrace) (*converge.Run, error) {
	var job *int64
	if len(hold) == 0 {
		id, err := s.jobInsert(ctx, tx, runID, ev.Kind, debounce)
		if err != nil {
			return nil, err
		}
		job = &id
	} else {
		debounce = 0
	}
	if hold == nil {
		hold = []string{}
	}
	run, err := scanRun(tx.QueryRow(ctx, runInsertSQL(`(VALUES ($1::uuid, $2::uuid, $3::int, $4::text, $5::text, $6::bigint, $7::int, $8::bigint, $9::bigint, $10::uuid,
				$11::text[], $12::int, $13::text, $14::text))
			u(id, e, n, k, rs, v, m, j, d, w, h, qa, tp, tl)`),
		runID, ev.ID, n, ev.Kind, ev.Resource, ev.Version, maxAttempts, job, debounce.Microseconds(), ev.WorkflowRunID, hold, quarantineAfter,
		trace.parent, trace.link))
	if err != nil {
		return nil, fmt.Errorf("insert run: %w", err)
	}
	if len(hold) > 0 {
		if err := s.notifyRunsHeld(ctx, tx, []*converge.Run{run}); err != nil {
			return nil, err
		}
	}
	return run, nil
}

// EventAcceptMany accepts events of distinct streams in one transaction,
// with set-based statements: the streams are locked in one statement, in
// the lock order, and the events, their runs and their jobs are written a
// statement (a River call for the jobs) each. Events whose version is not
// above their stream's latest are answered as EventAccept answers them, in
// the same transaction. It returns each event's answer (res[i] or errs[i])
// when the transaction committed, and otherwise the error that failed it
// as a whole (a payload PostgreSQL refuses, a deadlock): the caller then
// accepts each event with EventAccept, so that one bad request cannot fail
// the others and each gets the error it would get alone.
func (s *Store) EventAcceptMany(ctx context.Context, ps []EventAcceptParams) ([]*converge.EventAcceptResult, []error, error) {
	for _, p := range ps {
		if p.WorkflowRunID != nil || len(p.Hold) > 0 {
			return nil, nil, errors.New("accept events: a workflow step or a held event is accepted by its workflow run's transaction, not in a batch")
		}
	}
	res := make([]*converge.EventAcceptResult, len(ps))
	errs := make([]error, len(ps))
	var wfs []workflowStatus
	var tally acceptTally
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if err := s.eventAcceptMany(ctx, tx, &tally, ps, res, errs); err != nil {
			return err
		}
		var err error
		if slices.ContainsFunc(res, func(r *converge.EventAcceptResult) bool { return r != nil && len(r.SupersededRuns) > 0 }) {
			wfs, err = s.workflowStatusesTx(ctx, tx)
		}
		return err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("accept %d events: %w", len(ps), err)
	}
	// Only a committed batch is reported: one that failed as a whole is
	// redone by its caller one call at a time (EventAccept), each of
	// which reports its own.
	s.reportWorkflowStatuses(wfs)
	s.reportAccepts(&tally)
	return res, errs, nil
}

func (s *Store) eventAcceptMany(ctx context.Context, tx pgx.Tx, t *acceptTally, reqs []EventAcceptParams, res []*converge.EventAcceptResult,
	errs []error) error {
	// Load.
	order := sortStreams(len(reqs), func(i int) (string, string) { return reqs[i].Kind, reqs[i].Resource })
	kinds := make([]string, len(order))
	resources := make([]string, len(order))
	versions, debounces := make([]int64, len(order)), make([]int64, len(order))
	for j, i := range order {
		kinds[j], resources[j], versions[j], debounces[j] = reqs[i].Kind, reqs[i].Resource, reqs[i].Version, reqs[i].debounceMicros()
	}
	var b pgx.Batch
	b.Queue(upsertStreamSQL(`SELECT k, r, 0 FROM unnest($1::text[], $2::text[]) u(k, r) ORDER BY `+lockOrder("k", "r"),
		"kind, resource, "), kinds, resources)
	// Raise the latest versions and supersede the raised streams'
	// unfinished runs (the streams are locked by now, so the runs' locks
	// come after them, as everywhere). Planned for its arguments
	// (customPlanOn): see there.
	b.Queue(customPlanOn)
	b.Queue(`WITH raised AS (
			UPDATE converge_streams s SET `+fmt.Sprintf(raiseLatestSet, "u.v", "u.d")+`
			FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[]) u(k, r, v, d)
			WHERE s.kind = u.k AND s.resource = u.r AND s.latest_version < u.v
			RETURNING s.kind, s.resource, `+fmt.Sprintf(debounceLeftSQL, "u.d")+` AS d),
		superseded AS (
			UPDATE converge_runs r SET `+supersedeSet+`
			FROM raised WHERE r.kind = raised.kind AND r.resource = raised.resource
			  AND r.finished_at IS NULL
			RETURNING r.kind, r.resource, r.id, r.job_id)
		SELECT kind, resource, NULL::uuid, NULL::bigint, d FROM raised
		UNION ALL SELECT kind, resource, id, job_id, NULL FROM superseded`, kinds, resources, versions, debounces)
	b.Queue(customPlanOff)
	br := tx.SendBatch(ctx, &b)
	latest := make(map[streamKey]int64, len(reqs))
	quarantined := make(map[streamKey]bool)
	raised := make(map[streamKey]time.Duration, len(reqs)) // the raised streams, with their runs' debounce
	superseded := make(map[streamKey][]uuid.UUID)
	var jobs []int64
	err := scanEach(br, func(row pgx.Rows) error {
		var k streamKey
		var v int64
		var q bool
		if err := row.Scan(&k.kind, &k.resource, &v, &q); err != nil {
			return err
		}
		latest[k] = v
		if q {
			quarantined[k] = true
		}
		return nil
	})
	if err == nil {
		_, err = br.Exec() // customPlanOn
	}
	if err == nil {
		err = scanEach(br, func(row pgx.Rows) error {
			var k streamKey
			var run *uuid.UUID
			var job, debounceUS *int64
			if err := row.Scan(&k.kind, &k.resource, &run, &job, &debounceUS); err != nil {
				return err
			}
			if run == nil {
				raised[k] = time.Duration(*debounceUS) * time.Microsecond
				return nil
			}
			superseded[k] = append(superseded[k], *run)
			if job != nil {
				jobs = append(jobs, *job)
			}
			return nil
		})
	}
	if err == nil {
		_, err = br.Exec() // customPlanOff
	}
	if cerr := br.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("lock streams: %w", err)
	}
	if err := s.jobCancelMany(ctx, tx, jobs); err != nil {
		return err
	}

	// Plan and write: the new versions, in lock order, set-based.
	var fresh []int
	for _, i := range order {
		if _, ok := raised[streamKey{reqs[i].Kind, reqs[i].Resource}]; ok {
			fresh = append(fresh, i)
		}
	}
	if len(fresh) > 0 {
		if err := s.acceptFresh(ctx, tx, t, reqs, fresh, raised, quarantined, superseded, res); err != nil {
			return err
		}
	}
	// The old versions, one by one.
	for _, i := range order {
		p := reqs[i]
		k := streamKey{p.Kind, p.Resource}
		if _, ok := raised[k]; ok {
			continue
		}
		res[i], errs[i] = s.acceptOld(ctx, tx, p, latest[k])
		// A stale version or a conflict is this request's answer; any other
		// error, a payload PostgreSQL refused included, came from a failed
		// statement and ends the transaction (the requests are then
		// accepted alone, this one with that error).
		var appErr *converge.AppError
		if errs[i] != nil && (!errors.As(errs[i], &appErr) || appErr.Code == converge.EINVALID) {
			return errs[i]
		}
	}
	return nil
}

// acceptFresh writes the events reqs[fresh] (versions above their streams'
// latest, whose streams are locked and whose unfinished runs are
// superseded), their runs, held back as raised says of their stream, and
// their jobs, and notes the superseded runs in t. The runs of quarantined
// streams are held (hold quarantine) and get no job.
func (s *Store) acceptFresh(ctx context.Context, tx pgx.Tx, t *acceptTally, reqs []EventAcceptParams, fresh []int,
	raised map[streamKey]time.Duration, quarantined map[streamKey]bool, superseded map[streamKey][]uuid.UUID,
	res []*converge.EventAcceptResult) error {
	n := len(fresh)
	eventIDs, runIDs := make([]uuid.UUID, n), make([]uuid.UUID, n)
	kinds, resources := make([]string, n), make([]string, n)
	versions, maxAttempts, quarantineAfter := make([]int64, n), make([]int64, n), make([]int64, n)
	payloads, traceParents := make([]string, n), make([]string, n)
	debounces := make([]time.Duration, n)
	held := make([]bool, n)
	jobRuns, jobKinds, jobDebounces := make([]uuid.UUID, 0, n), make([]string, 0, n), make([]time.Duration, 0, n)
	for j, i := range fresh {
		p := reqs[i]
		k := streamKey{p.Kind, p.Resource}
		plan := planFresh(raised[k])
		eventIDs[j], runIDs[j], debounces[j] = plan.eventID, plan.runID, plan.debounce
		kinds[j], resources[j], versions[j], maxAttempts[j] = p.Kind, p.Resource, p.Version, int64(p.MaxAttempts)
		quarantineAfter[j] = int64(p.QuarantineAfter)
		payloads[j] = string(p.Payload)
		traceParents[j] = p.TraceParent
		held[j] = quarantined[k]
		if held[j] {
			debounces[j] = 0
			continue
		}
		jobRuns, jobKinds, jobDebounces = append(jobRuns, runIDs[j]), append(jobKinds, p.Kind), append(jobDebounces, debounces[j])
	}
	jobIDs := make([]*int64, n)
	if len(jobRuns) > 0 {
		ids, err := s.jobInsertMany(ctx, tx, jobRuns, jobKinds, jobDebounces)
		if err != nil {
			return err
		}
		x := 0
		for j := range runIDs {
			if !held[j] {
				jobIDs[j] = &ids[x]
				x++
			}
		}
	}
	debounceUS := make([]int64, n)
	for j, d := range debounces {
		debounceUS[j] = d.Microseconds()
	}

	var b pgx.Batch
	b.Queue(eventInsertSQL(`(SELECT id, k, r, v, p::jsonb AS p, NULL::uuid AS w
			FROM unnest($1::uuid[], $2::text[], $3::text[], $4::bigint[], $5::text[]) u(id, k, r, v, p)) u`,
		`id, payload, received_at`), uuids(eventIDs), kinds, resources, versions, payloads)
	b.Queue(runInsertSQL(`(SELECT id, e, 1 AS n, k, rs, v, m, j, d, NULL::uuid AS w,
				CASE WHEN q THEN '{quarantine}'::text[] ELSE '{}'::text[] END AS h, qa, tp, NULL::text AS tl
			FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::text[], $5::bigint[], $6::bigint[], $7::bigint[], $8::bigint[], $9::bool[], $10::bigint[],
				$11::text[])
				u(id, e, k, rs, v, m, j, d, q, qa, tp)) u`),
		uuids(runIDs), uuids(eventIDs), kinds, resources, versions, maxAttempts, jobIDs, debounceUS, held, quarantineAfter, traceParents)
	br := tx.SendBatch(ctx, &b)
	defer func() { _ = br.Close() }()

	events := make(map[uuid.UUID]*converge.Event, n)
	err := scanEach(br, func(row pgx.Rows) error {
		ev := &converge.Event{Status: converge.RunQueued}
		if err := row.Scan(uuidDest(&ev.ID), &ev.Payload, &ev.ReceivedAt); err != nil {
			return err
		}
		ev.ReceivedAt = ev.ReceivedAt.UTC()
		events[ev.ID] = ev
		return nil
	})
	if err != nil {
		return fmt.Errorf("insert events: %w", payloadError(err))
	}
	runs := make(map[uuid.UUID]*converge.Run, n)
	runScan := newRunScanner()
	err = scanEach(br, func(row pgx.Rows) error {
		r, err := runScan.scan(row)
		if err != nil {
			return err
		}
		runs[r.ID] = r
		return nil
	})
	if err != nil {
		return fmt.Errorf("insert runs: %w", err)
	}
	if err := br.Close(); err != nil {
		return fmt.Errorf("accept events: %w", err)
	}
	var heldRuns []*converge.Run
	for j, i := range fresh {
		p := reqs[i]
		ev, run := events[eventIDs[j]], runs[runIDs[j]]
		if ev == nil || run == nil {
			return fmt.Errorf("accept events: event %s or run %s not written", eventIDs[j], runIDs[j])
		}
		ev.Kind, ev.Resource, ev.Version = p.Kind, p.Resource, p.Version
		ev.Status = run.Status
		ids := superseded[streamKey{p.Kind, p.Resource}]
		if ids == nil {
			ids = []uuid.UUID{}
		}
		res[i] = &converge.EventAcceptResult{Event: ev, Run: run, SupersededRuns: ids}
		t.supersede(p.Kind, len(ids))
		if held[j] {
			heldRuns = append(heldRuns, run)
		}
	}
	return s.notifyRunsHeld(ctx, tx, heldRuns)
}
