package invariant

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Params is what Check looks at besides the database.
type Params struct {
	// Calls is the target's log (Target.Calls, or gathered by the test).
	Calls []Call
	// Submissions, when not empty, must be every POST /v1/events the
	// test made, with its answer; they are checked against the database
	// (G5, and every superseded run listed in exactly one answer).
	Submissions []Submission
	// Applied, when set, is stopped and its samples of applied_version
	// taken while converge ran are checked (G8 over time).
	Applied *AppliedWatch
	// AllowUnconverged accepts streams whose applied_version is below
	// their latest accepted version when the latest version's run ended
	// failed or cancelled (tests with permanent errors or operator
	// cancels). Without it, every stream must have applied its latest
	// version.
	AllowUnconverged bool
	// AllowHeld accepts runs that are still held when Check runs (waiting
	// for an operator's approval or a quarantine's release, SPEC §11):
	// they are not reported as unfinished, and a stream whose latest run
	// is held may be behind its latest version. checkHeld still holds
	// them to never having called their target.
	AllowHeld bool
	// WorkflowsConverge asserts that every workflow's last stages applied
	// the highest version that passed all its earlier stages (tests
	// without permanent errors, cancels or approvals).
	WorkflowsConverge bool
}

// Submission is one POST /v1/events and its answer.
type Submission struct {
	Kind     string
	Resource string
	Version  int64
	// Payload is the payload sent, compact JSON.
	Payload string
	// Status is the HTTP status answered; Problem the problem type's slug
	// for an error ("stale-version").
	Status  int
	Problem string
	// EventID and SupersededRuns are from a 200 or 202 answer.
	EventID        uuid.UUID
	SupersededRuns []uuid.UUID
}

// Violation is a broken rule.
type Violation struct {
	// Rule is the guarantee ("G3") or check ("calls") that failed.
	Rule string
	// Stream is "kind resource", when the violation is about one.
	Stream  string
	Message string
}

func (v Violation) String() string {
	if v.Stream == "" {
		return v.Rule + ": " + v.Message
	}
	return v.Rule + " [" + v.Stream + "]: " + v.Message
}

// Report is what Check found.
type Report struct {
	Streams           int
	Events            int
	Runs              int
	Attempts          int
	Calls             int
	Supersessions     int // runs that ended superseded
	CancelledAttempts int
	AbandonedAttempts int
	DeadLetters       int
	RunsByStatus      map[string]int
	AttemptsByOutcome map[string]int
	CallsByOutcome    map[string]int
	// LateObservations counts the calls the target saw end after converge
	// had already finished their attempt (a withdrawn call: the target
	// noticed the closed connection late, or even began handling the
	// request late); MaxObservationLag is the longest such lag. See
	// Check.
	LateObservations  int
	MaxObservationLag time.Duration
	AppliedProbes     int // samples taken by Params.Applied
	WorkflowRuns      int
	Violations        []Violation
}

// Summary is a one-line account of the counts.
func (r *Report) Summary() string {
	return fmt.Sprintf("streams=%d events=%d runs=%d attempts=%d calls=%d supersessions=%d cancelled_attempts=%d abandoned_attempts=%d dead_letters=%d runs_by_status=%v attempts_by_outcome=%v calls_by_outcome=%v applied_probes=%d workflow_runs=%d violations=%d",
		r.Streams, r.Events, r.Runs, r.Attempts, r.Calls, r.Supersessions, r.CancelledAttempts, r.AbandonedAttempts,
		r.DeadLetters, r.RunsByStatus, r.AttemptsByOutcome, r.CallsByOutcome, r.AppliedProbes, r.WorkflowRuns, len(r.Violations))
}

// Check reads the database and asserts, with the call log:
//
//   - G2: per stream, the versions of calls ordered by start never
//     decrease; nor do the versions of attempts ordered by started_at.
//   - G3: per stream, no call starts before every earlier call has ended.
//   - G4: a call of version V that ended after a higher version W of its
//     stream was accepted (W's received_at) belongs to an attempt recorded
//     cancelled or abandoned (it was in flight); no attempt of V began, and
//     no run of V ended succeeded or failed, after W was accepted; a
//     superseded run is below its stream's latest version, has no dead
//     letter, and is listed in the superseded_runs of one answer.
//   - G5: one event per (kind, resource, version); the answers agree with
//     the database (a 202 or 200 names the event there, a 409 changed
//     nothing, a replay of an equal payload is a 200); latest_version is the
//     highest event version.
//   - G6: terminal runs have finished_at and others do not; the database
//     refuses to change or delete a terminal run (probed in a rolled-back
//     transaction); a run's attempt count matches its attempt rows, within
//     max_attempts; no attempt is left open.
//   - G8: applied_version is the highest version whose run succeeded and
//     never decreased in Params.Applied's samples; it equals
//     latest_version (see AllowUnconverged).
//   - every run is terminal; dead letters belong to failed runs only.
//   - counts: converge_run_counts (migration 000014, what
//     converge_runs{kind,status} reads for the terminal statuses), its
//     deltas summed, equals the terminal runs by kind and status
//     (checkRunCounts).
//   - held: a run that was held and is still held, or ended superseded
//     or cancelled (rejected) while held, has no attempt and its target
//     was never called (checkHeld).
//   - W: the workflow invariants of checkWorkflows.
//   - calls and attempts agree: every call is an attempt of its run, of
//     the run's stream and version, made once; an attempt recorded
//     succeeded, transient_error or permanent_error was a call that ended
//     that way.
//
// How calls are timed for G2 and G3. A call spans from the target's Start
// to its End, each cut at its attempt's finished_at when that is earlier.
// The target sees a call converge withdrew (superseded, cancelled, lease
// lost) end only when its handler notices the closed connection, and may
// even enter the handler after the client closed it: the target process
// schedules it late, by tens of milliseconds on a loaded machine and
// hundreds under -race. finished_at is read after converge's call returned
// and before the stream's lease is released, so the next call of the
// stream cannot start before it. Such lateness is counted in
// LateObservations, not reported. This is evidence, not a time tolerance:
// a call that converge still had open when the next one started, and that
// the target saw in flight then, is a violation however short the overlap.
//
// Times from the call log are compared with times from the database, so
// the target and PostgreSQL must share a clock (run on one host). The
// G2/G4 database checks rely on converge stamping events.received_at and
// attempts.started_at with clock_timestamp() while holding the stream's
// row lock, which orders them as the lock does.
func Check(ctx context.Context, pool *pgxpool.Pool, p Params) (*Report, error) {
	db, err := load(ctx, pool)
	if err != nil {
		return nil, err
	}
	c := &checker{p: p, db: db, rep: &Report{
		RunsByStatus: map[string]int{}, AttemptsByOutcome: map[string]int{}, CallsByOutcome: map[string]int{},
	}}
	c.count()
	c.checkCalls()
	spans := c.spansByStream()
	c.checkG2(spans)
	c.checkG3(spans)
	c.checkG4()
	c.checkG5()
	c.checkG6()
	if err := c.probeOneShot(ctx, pool); err != nil {
		return nil, err
	}
	c.checkG8()
	c.checkRunCounts()
	c.checkHeld()
	c.checkWorkflows()
	return c.rep, nil
}

type checker struct {
	p   Params
	db  *snapshot
	rep *Report
}

func (c *checker) fail(rule, stream, format string, args ...any) {
	c.rep.Violations = append(c.rep.Violations, Violation{Rule: rule, Stream: stream, Message: fmt.Sprintf(format, args...)})
}

func (c *checker) count() {
	r := c.rep
	r.Streams, r.Events, r.Runs, r.Attempts, r.Calls, r.DeadLetters =
		len(c.db.streams), len(c.db.events), len(c.db.runs), len(c.db.attempts), len(c.p.Calls), len(c.db.deadLetters)
	for _, run := range c.db.runs {
		r.RunsByStatus[run.status]++
	}
	for _, a := range c.db.attempts {
		r.AttemptsByOutcome[a.outcomeString()]++
	}
	for _, call := range c.p.Calls {
		r.CallsByOutcome[string(call.Outcome)]++
	}
	r.Supersessions = r.RunsByStatus["superseded"]
	r.CancelledAttempts = r.AttemptsByOutcome["cancelled"]
	r.AbandonedAttempts = r.AttemptsByOutcome["abandoned"]
}

// checkCalls matches calls with attempt rows.
func (c *checker) checkCalls() {
	seen := map[attemptKey][]Call{}
	for _, call := range c.p.Calls {
		k := attemptKey{call.RunID, call.Attempt}
		seen[k] = append(seen[k], call)
		run, ok := c.db.runs[call.RunID]
		if !ok {
			c.fail("calls", call.Stream(), "call of unknown run: %s", call)
			continue
		}
		if run.kind != call.Kind || run.resource != call.Resource || run.version != call.Version {
			c.fail("calls", call.Stream(), "call does not match its run (%s %s@%d): %s", run.kind, run.resource, run.version, call)
		}
		if _, ok := c.db.attempts[k]; !ok {
			c.fail("calls", call.Stream(), "call without an attempt row: %s", call)
		}
	}
	for k, calls := range seen {
		if len(calls) > 1 {
			c.fail("calls", calls[0].Stream(), "attempt %d of run %s was called %d times: %s", k.number, k.runID, len(calls), calls)
		}
	}
	for _, k := range sortedAttempts(c.db.attempts) {
		a := c.db.attempts[k]
		run := c.db.runs[k.runID]
		calls := seen[k]
		var want []CallOutcome
		switch a.outcomeString() {
		case "succeeded":
			want = []CallOutcome{CallSucceeded}
		case "transient_error":
			// A call converge gave up on (its timeout) is cancelled from the
			// target's side.
			want = []CallOutcome{CallTransient, CallCancelled}
		case "permanent_error":
			want = []CallOutcome{CallPermanent}
		default:
			// cancelled, abandoned, open: the call may or may not have
			// reached the target, and may have ended any way.
			continue
		}
		if len(calls) == 0 {
			c.fail("calls", run.stream(), "attempt %d of run %s (%s@%d) recorded %s, but the target saw no call", k.number, k.runID, run.stream(), run.version, a.outcomeString())
			continue
		}
		if last := calls[len(calls)-1]; !slices.Contains(want, last.Outcome) {
			c.fail("calls", run.stream(), "attempt %d of run %s recorded %s, but the target's call ended %s", k.number, k.runID, a.outcomeString(), last.Outcome)
		}
	}
}

// span is a call as it counts for G2 and G3: the target's times, cut at
// the attempt's finished_at (see Check).
type span struct {
	call       *Call
	start, end time.Time
}

func (c *checker) spansByStream() map[string][]span {
	by := map[string][]span{}
	for i := range c.p.Calls {
		call := &c.p.Calls[i]
		sp := span{call: call, start: call.Start, end: call.End}
		if a := c.db.attempts[attemptKey{call.RunID, call.Attempt}]; a != nil && a.finishedAt != nil {
			fin := *a.finishedAt
			if sp.end.After(fin) {
				c.rep.LateObservations++
				c.rep.MaxObservationLag = max(c.rep.MaxObservationLag, sp.end.Sub(fin))
				sp.end = fin
			}
			if sp.start.After(fin) {
				sp.start = fin
			}
		}
		by[call.Stream()] = append(by[call.Stream()], sp)
	}
	for _, spans := range by {
		slices.SortStableFunc(spans, func(a, b span) int { return a.start.Compare(b.start) })
	}
	return by
}

// checkG2: never new then old.
func (c *checker) checkG2(spans map[string][]span) {
	for stream, ss := range sortedMap(spans) {
		for i := 1; i < len(ss); i++ {
			if ss[i].call.Version < ss[i-1].call.Version {
				c.fail("G2", stream, "version %d called after version %d: %s after %s",
					ss[i].call.Version, ss[i-1].call.Version, ss[i].call, ss[i-1].call)
			}
		}
	}
	byStream := map[string][]*dbAttempt{}
	for _, a := range c.db.attempts {
		run := c.db.runs[a.runID]
		byStream[run.stream()] = append(byStream[run.stream()], a)
	}
	for stream, as := range sortedMap(byStream) {
		slices.SortFunc(as, func(a, b *dbAttempt) int { return a.startedAt.Compare(b.startedAt) })
		for i := 1; i < len(as); i++ {
			v, prev := c.db.runs[as[i].runID].version, c.db.runs[as[i-1].runID].version
			if v < prev {
				c.fail("G2", stream, "attempt of version %d began (%s) after an attempt of version %d (%s)",
					v, as[i].startedAt.Format(time.RFC3339Nano), prev, as[i-1].startedAt.Format(time.RFC3339Nano))
			}
		}
	}
}

// checkG3: one call at a time per stream.
func (c *checker) checkG3(spans map[string][]span) {
	for stream, ss := range sortedMap(spans) {
		var last span // the span with the latest end so far
		for i, sp := range ss {
			if i > 0 && sp.start.Before(last.end) {
				c.fail("G3", stream, "calls overlap by %s: %s started before %s ended", last.end.Sub(sp.start), sp.call, last.call)
			}
			if i == 0 || sp.end.After(last.end) {
				last = sp
			}
		}
	}
}

// checkG4: supersession.
func (c *checker) checkG4() {
	// firstAbove[stream][v] is the earliest received_at of a version above
	// v; versions are accepted in increasing order, so it is the
	// received_at of the next accepted version.
	next := map[uuid.UUID]*dbEvent{} // run id -> next higher event of its stream
	byStream := map[string][]*dbEvent{}
	for _, e := range c.db.events {
		byStream[e.stream()] = append(byStream[e.stream()], e)
	}
	higher := func(stream string, v int64) *dbEvent {
		es := byStream[stream]
		i, _ := slices.BinarySearchFunc(es, v+1, func(e *dbEvent, v int64) int { return cmp.Compare(e.version, v) })
		if i < len(es) {
			return es[i]
		}
		return nil
	}
	for stream, es := range sortedMap(byStream) {
		slices.SortFunc(es, func(a, b *dbEvent) int { return cmp.Compare(a.version, b.version) })
		for i := 1; i < len(es); i++ {
			if !es[i].receivedAt.After(es[i-1].receivedAt) {
				c.fail("G4", stream, "version %d was received (%s) no later than version %d (%s)", es[i].version,
					es[i].receivedAt.Format(time.RFC3339Nano), es[i-1].version, es[i-1].receivedAt.Format(time.RFC3339Nano))
			}
		}
	}
	for _, run := range c.db.runs {
		if h := higher(run.stream(), run.version); h != nil {
			next[run.id] = h
		}
	}
	for _, call := range c.p.Calls {
		h := next[call.RunID]
		if h == nil || !call.End.After(h.receivedAt) {
			continue
		}
		a := c.db.attempts[attemptKey{call.RunID, call.Attempt}]
		if a == nil || (a.outcomeString() != "cancelled" && a.outcomeString() != "abandoned") {
			outcome := "no attempt row"
			if a != nil {
				outcome = "recorded " + a.outcomeString()
			}
			c.fail("G4", call.Stream(), "call ended %s after version %d was accepted (%s) and its attempt is %s, not cancelled: %s",
				call.End.Sub(h.receivedAt), h.version, h.receivedAt.Format(time.RFC3339Nano), outcome, call)
		}
	}
	for _, k := range sortedAttempts(c.db.attempts) {
		a := c.db.attempts[k]
		run := c.db.runs[k.runID]
		if h := next[run.id]; h != nil && !a.startedAt.Before(h.receivedAt) {
			c.fail("G4", run.stream(), "attempt %d of version %d began (%s) after version %d was accepted (%s)",
				k.number, run.version, a.startedAt.Format(time.RFC3339Nano), h.version, h.receivedAt.Format(time.RFC3339Nano))
		}
	}
	listed := map[uuid.UUID]int{}
	for _, s := range c.p.Submissions {
		for _, id := range s.SupersededRuns {
			listed[id]++
			run, ok := c.db.runs[id]
			switch {
			case !ok:
				c.fail("G4", s.stream(), "answer to version %d lists unknown superseded run %s", s.Version, id)
			case run.status != "superseded" || run.stream() != s.stream() || run.version >= s.Version:
				c.fail("G4", s.stream(), "answer to version %d lists run %s (%s@%d, %s) as superseded", s.Version, id, run.stream(), run.version, run.status)
			}
		}
	}
	for _, id := range sortedRuns(c.db.runs) {
		run := c.db.runs[id]
		h := next[id]
		switch run.status {
		case "superseded":
			if h == nil {
				c.fail("G4", run.stream(), "run %s of the latest version %d ended superseded", id, run.version)
			}
			if len(c.p.Submissions) > 0 && listed[id] != 1 {
				c.fail("G4", run.stream(), "superseded run %s (version %d) is listed in %d answers' superseded_runs, want 1", id, run.version, listed[id])
			}
		case "succeeded", "failed":
			if h != nil && run.finishedAt != nil && run.finishedAt.After(h.receivedAt) {
				c.fail("G4", run.stream(), "run %s of version %d ended %s (%s) after version %d was accepted (%s)", id, run.version,
					run.status, run.finishedAt.Format(time.RFC3339Nano), h.version, h.receivedAt.Format(time.RFC3339Nano))
			}
		}
	}
	for _, d := range c.db.deadLetters {
		run, ok := c.db.runs[d.runID]
		if !ok || run.status != "failed" {
			status := "missing"
			if ok {
				status = run.status
			}
			c.fail("G4", d.stream(), "dead letter %s is of run %s whose status is %s, not failed", d.id, d.runID, status)
		}
	}
}

// checkG5: stale and duplicate events.
func (c *checker) checkG5() {
	byKey := map[eventKey][]*dbEvent{}
	maxVersion := map[string]int64{}
	for _, e := range c.db.events {
		k := eventKey{e.kind, e.resource, e.version}
		byKey[k] = append(byKey[k], e)
		maxVersion[e.stream()] = max(maxVersion[e.stream()], e.version)
	}
	for k, es := range byKey {
		if len(es) != 1 {
			c.fail("G5", k.stream(), "%d events for version %d, want 1", len(es), k.version)
		}
	}
	for _, s := range slices.Sorted(maps.Keys(c.db.streams)) {
		st := c.db.streams[s]
		if st.latest != maxVersion[s] {
			c.fail("G5", s, "latest_version is %d, highest event version %d", st.latest, maxVersion[s])
		}
	}
	accepted := map[eventKey]Submission{}
	for _, s := range c.p.Submissions {
		k := eventKey{s.Kind, s.Resource, s.Version}
		if s.Status == 202 {
			if prev, dup := accepted[k]; dup {
				c.fail("G5", s.stream(), "version %d accepted twice (events %s and %s)", s.Version, prev.EventID, s.EventID)
			}
			accepted[k] = s
		}
	}
	for _, s := range c.p.Submissions {
		k := eventKey{s.Kind, s.Resource, s.Version}
		es := byKey[k]
		acc, wasAccepted := accepted[k]
		switch {
		case s.Status == 202 || s.Status == 200:
			if len(es) == 0 || es[0].id != s.EventID {
				c.fail("G5", s.stream(), "answer %d names event %s for version %d, the database has %v", s.Status, s.EventID, s.Version, es)
			}
			if s.Status == 200 && wasAccepted && (acc.EventID != s.EventID || acc.Payload != s.Payload) {
				c.fail("G5", s.stream(), "replay of version %d answered 200 with event %s; accepted as %s", s.Version, s.EventID, acc.EventID)
			}
			if s.Status == 200 && len(s.SupersededRuns) != 0 {
				c.fail("G5", s.stream(), "replay of version %d superseded runs %v", s.Version, s.SupersededRuns)
			}
		case s.Status == 409:
			if s.Problem != "stale-version" && s.Problem != "version-conflict" {
				c.fail("G5", s.stream(), "409 for version %d with problem %q", s.Version, s.Problem)
			}
			if wasAccepted && acc.Payload == s.Payload {
				c.fail("G5", s.stream(), "replay of accepted version %d with an equal payload answered 409 %s", s.Version, s.Problem)
			}
			if !wasAccepted && len(es) > 0 {
				c.fail("G5", s.stream(), "version %d was answered 409 %s and never 202, but the database has event %s", s.Version, s.Problem, es[0].id)
			}
		default:
			c.fail("G5", s.stream(), "version %d answered %d %s", s.Version, s.Status, s.Problem)
		}
	}
}

// checkG6: one-shot runs, and every run terminal.
func (c *checker) checkG6() {
	perRun := map[uuid.UUID][]*dbAttempt{}
	for _, a := range c.db.attempts {
		perRun[a.runID] = append(perRun[a.runID], a)
	}
	for _, id := range sortedRuns(c.db.runs) {
		run := c.db.runs[id]
		if !terminal(run.status) && !(c.p.AllowHeld && run.status == "held") {
			c.fail("terminal", run.stream(), "run %s of version %d is %s", id, run.version, run.status)
		}
		if terminal(run.status) != (run.finishedAt != nil) {
			c.fail("G6", run.stream(), "run %s is %s with finished_at %v", id, run.status, run.finishedAt)
		}
		as := perRun[id]
		if len(as) != run.attempts {
			c.fail("G6", run.stream(), "run %s counts %d attempts and has %d attempt rows", id, run.attempts, len(as))
		}
		if run.attempts > run.maxAttempts {
			c.fail("G6", run.stream(), "run %s made %d attempts, max_attempts %d", id, run.attempts, run.maxAttempts)
		}
		for _, a := range as {
			if a.outcome == nil {
				c.fail("G6", run.stream(), "attempt %d of run %s (%s) is still open", a.number, id, run.status)
			}
			if a.number < 1 || a.number > run.attempts {
				c.fail("G6", run.stream(), "run %s has attempt number %d of %d", id, a.number, run.attempts)
			}
		}
	}
}

// probeOneShot asks the database to change and delete one terminal run of
// each terminal status, in a transaction that is rolled back, and expects
// it to refuse (SQLSTATE CV006).
func (c *checker) probeOneShot(ctx context.Context, pool *pgxpool.Pool) error {
	probe := map[string]uuid.UUID{}
	for _, id := range sortedRuns(c.db.runs) {
		run := c.db.runs[id]
		if _, ok := probe[run.status]; !ok && terminal(run.status) {
			probe[run.status] = id
		}
	}
	if len(probe) == 0 {
		return nil
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("probe one-shot trigger: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	changes := []string{
		`UPDATE converge_runs SET status = 'queued', finished_at = NULL WHERE id = $1`,
		`UPDATE converge_runs SET finished_at = finished_at + interval '1 second' WHERE id = $1`,
		`UPDATE converge_runs SET error = '{"class":"transient","message":"probe"}' WHERE id = $1`,
		`DELETE FROM converge_runs WHERE id = $1`,
	}
	for _, status := range slices.Sorted(maps.Keys(probe)) {
		id := probe[status]
		for _, sql := range changes {
			if _, err := tx.Exec(ctx, `SAVEPOINT probe`); err != nil {
				return fmt.Errorf("probe one-shot trigger: %w", err)
			}
			_, err := tx.Exec(ctx, sql, id)
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) || pgErr.Code != "CV006" {
				c.fail("G6", c.db.runs[id].stream(), "the database let %q run on %s run %s (error %v), want SQLSTATE CV006", sql, status, id, err)
			}
			if _, err := tx.Exec(ctx, `ROLLBACK TO SAVEPOINT probe`); err != nil {
				return fmt.Errorf("probe one-shot trigger: %w", err)
			}
		}
	}
	return nil
}

// checkG8: applied version.
func (c *checker) checkG8() {
	bestSucceeded := map[string]int64{}
	latestRun := map[string]*dbRun{}
	for _, run := range c.db.runs {
		s := run.stream()
		if run.status == "succeeded" {
			bestSucceeded[s] = max(bestSucceeded[s], run.version)
		}
		if l := latestRun[s]; l == nil || run.version > l.version || run.version == l.version && run.number > l.number {
			latestRun[s] = run
		}
	}
	for _, s := range slices.Sorted(maps.Keys(c.db.streams)) {
		st := c.db.streams[s]
		applied := int64(0)
		if st.applied != nil {
			applied = *st.applied
		}
		if applied != bestSucceeded[s] {
			c.fail("G8", s, "applied_version is %d, highest succeeded version %d", applied, bestSucceeded[s])
		}
		if applied == st.latest {
			continue
		}
		l := latestRun[s]
		allowed := c.p.AllowUnconverged && l != nil && l.version == st.latest && (l.status == "failed" || l.status == "cancelled") ||
			c.p.AllowHeld && l != nil && l.version == st.latest && l.status == "held"
		if !allowed {
			status := "no run"
			if l != nil {
				status = fmt.Sprintf("run of version %d %s", l.version, l.status)
			}
			c.fail("G8", s, "applied_version %d is not latest_version %d (%s)", applied, st.latest, status)
		}
	}
	if c.p.Applied != nil {
		probes, decreases := c.p.Applied.findings()
		c.rep.AppliedProbes = probes
		for _, d := range decreases {
			c.fail("G8", d.stream, "applied_version went from %d down to %d", d.from, d.to)
		}
	}
}

// checkHeld checks held work (SPEC §11): a held run never had an attempt
// nor called its target while held. Its hold list is emptied when it is
// released (it is then queued), and kept when it ends superseded or
// cancelled (rejected) while held, so a run whose hold list is not empty
// never left held for queued: it has no attempt, no call in the target's
// log, and while it is still held, no job (no worker can begin it).
func (c *checker) checkHeld() {
	calls := map[uuid.UUID]int{}
	for _, call := range c.p.Calls {
		calls[call.RunID]++
	}
	for _, id := range sortedRuns(c.db.runs) {
		r := c.db.runs[id]
		if len(r.hold) == 0 {
			if r.status == "held" {
				c.fail("held", r.stream(), "run %s is held with an empty hold list", id)
			}
			continue
		}
		if r.status != "held" && r.status != "superseded" && r.status != "cancelled" {
			c.fail("held", r.stream(), "run %s is %s with hold %v: it left held without being released", id, r.status, r.hold)
		}
		n := 0
		for k := range c.db.attempts {
			if k.runID == id {
				n++
			}
		}
		if n > 0 || r.attempts > 0 {
			c.fail("held", r.stream(), "run %s was held (%v) and has %d attempts", id, r.hold, max(n, r.attempts))
		}
		if calls[id] > 0 {
			c.fail("held", r.stream(), "run %s was held (%v) and its target was called %d times", id, r.hold, calls[id])
		}
		if r.status == "held" && r.jobID != nil {
			c.fail("held", r.stream(), "run %s is held and has job %d", id, *r.jobID)
		}
	}
}

func terminal(status string) bool {
	switch status {
	case "succeeded", "failed", "superseded", "cancelled":
		return true
	}
	return false
}

func (s Submission) stream() string { return s.Kind + " " + s.Resource }

// CompactJSON returns v as compact JSON, for Submission.Payload.
func CompactJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// sortedRuns and sortedAttempts return keys in order, so that violations
// are reported in a stable order.
func sortedRuns(m map[uuid.UUID]*dbRun) []uuid.UUID {
	keys := slices.Collect(maps.Keys(m))
	slices.SortFunc(keys, func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })
	return keys
}

func sortedAttempts(m map[attemptKey]*dbAttempt) []attemptKey {
	keys := slices.Collect(maps.Keys(m))
	slices.SortFunc(keys, func(a, b attemptKey) int {
		return cmp.Or(bytes.Compare(a.runID[:], b.runID[:]), cmp.Compare(a.number, b.number))
	})
	return keys
}

// sortedMap iterates m in key order.
func sortedMap[V any](m map[string]V) func(func(string, V) bool) {
	return func(yield func(string, V) bool) {
		for _, k := range slices.Sorted(maps.Keys(m)) {
			if !yield(k, m[k]) {
				return
			}
		}
	}
}
