package store_test

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/store"
	"github.com/converge-run/converge/test/pgtest"
)

const day = 24 * time.Hour

// v7At returns a version 7 UUID of moment t (ids are made so by the
// process when the row is written).
func v7At(t time.Time) uuid.UUID {
	var id uuid.UUID
	_, _ = rand.Read(id[:])
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(t.UnixMilli()))
	copy(id[:6], b[2:])
	id[6] = id[6]&0x0f | 0x70
	id[8] = id[8]&0x3f | 0x80
	return id
}

// pruneFixture writes rows straight into a database of its own, with the
// times a test needs.
type pruneFixture struct {
	t    *testing.T
	pool *pgxpool.Pool
	st   *store.Store
	now  time.Time
}

func newPruneFixture(t *testing.T) *pruneFixture {
	t.Helper()
	pool := pgtest.OpenPool(t, pgtest.NewDatabase(t), 4)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		t.Fatalf("river client: %v", err)
	}
	return &pruneFixture{t: t, pool: pool, st: store.New(pool, client), now: time.Now().UTC().Truncate(time.Microsecond)}
}

func (f *pruneFixture) exec(sql string, args ...any) {
	f.t.Helper()
	if _, err := f.pool.Exec(f.t.Context(), sql, args...); err != nil {
		f.t.Fatalf("%s: %v", sql, err)
	}
}

// stream writes a stream row.
func (f *pruneFixture) stream(kind, resource string, latest int64, applied *int64) {
	f.t.Helper()
	f.exec(`INSERT INTO converge_streams (kind, resource, latest_version, applied_version) VALUES ($1, $2, $3, $4)`, kind, resource, latest, applied)
}

// event writes an event received at "at" ago.
func (f *pruneFixture) event(kind, resource string, version int64, ago time.Duration, workflowRun *uuid.UUID) uuid.UUID {
	f.t.Helper()
	at := f.now.Add(-ago)
	id := v7At(at)
	f.exec(`INSERT INTO converge_events (id, kind, resource, version, payload, received_at, workflow_run_id) VALUES ($1, $2, $3, $4, '{}', $5, $6)`,
		id, kind, resource, version, at, workflowRun)
	return id
}

// run writes run number n of event ev with status, finished finishedAgo
// ago when terminal, with one attempt.
func (f *pruneFixture) run(ev uuid.UUID, n int, status string, finishedAgo time.Duration) uuid.UUID {
	f.t.Helper()
	var kind, resource string
	var version int64
	var wf *uuid.UUID
	if err := f.pool.QueryRow(f.t.Context(), `SELECT kind, resource, version, workflow_run_id FROM converge_events WHERE id = $1`, ev).
		Scan(&kind, &resource, &version, &wf); err != nil {
		f.t.Fatal(err)
	}
	id := newUUID()
	var finished *time.Time
	hold := []string{}
	switch status {
	case "succeeded", "failed", "superseded", "cancelled":
		at := f.now.Add(-finishedAgo)
		finished = &at
	case "held":
		hold = []string{"approval"}
	}
	created := f.now.Add(-finishedAgo - time.Minute)
	f.exec(`INSERT INTO converge_runs (id, event_id, number, kind, resource, version, status, attempts, max_attempts, created_at, finished_at, hold, workflow_run_id)
		VALUES ($1, $2, $3, $4, $5, $6, $7, 1, 3, $8, $9, $10, $11)`, id, ev, n, kind, resource, version, status, created, finished, hold, wf)
	if status != "held" && status != "queued" {
		outcome := "succeeded"
		if status != "succeeded" {
			outcome = "transient_error"
		}
		if status == "running" {
			f.exec(`INSERT INTO converge_attempts (run_id, number, started_at) VALUES ($1, 1, $2)`, id, created)
		} else {
			f.exec(`INSERT INTO converge_attempts (run_id, number, outcome, started_at, finished_at) VALUES ($1, 1, $2, $3, $4)`, id, outcome, created, finished)
		}
	}
	return id
}

// deadLetter writes the dead letter of failed run r, resolved resolvedAgo
// ago when status is not open.
func (f *pruneFixture) deadLetter(ev, r uuid.UUID, status string, resolvedAgo time.Duration) uuid.UUID {
	f.t.Helper()
	id := newUUID()
	var resolved *time.Time
	if status != "open" {
		at := f.now.Add(-resolvedAgo)
		resolved = &at
	}
	f.exec(`INSERT INTO converge_dead_letters (id, event_id, run_id, kind, resource, version, reason, attempts, payload, status, resolved_at)
		SELECT $1, e.id, $2, e.kind, e.resource, e.version, 'attempts_exhausted', 1, '{}', $3, $4 FROM converge_events e WHERE e.id = $5`,
		id, r, status, resolved, ev)
	return id
}

// workflowRun writes a workflow run, final finishedAgo ago when status is
// final, with one step per event given.
func (f *pruneFixture) workflowRun(resource string, status string, finishedAgo time.Duration) uuid.UUID {
	f.t.Helper()
	at := f.now.Add(-finishedAgo)
	id := v7At(at.Add(-time.Hour))
	var finished *time.Time
	if status != "running" {
		finished = &at
	}
	f.exec(`INSERT INTO converge_workflow_runs (id, workflow, resource, version, payload, status, created_at, finished_at)
		VALUES ($1, 'release', $2, 1, '{}', $3, $4, $5)`, id, resource, status, at.Add(-time.Hour), finished)
	return id
}

// step writes step name of workflow run w, accepted as event ev.
func (f *pruneFixture) step(w uuid.UUID, name string, ev uuid.UUID) {
	f.t.Helper()
	f.exec(`INSERT INTO converge_workflow_steps (workflow_run_id, name, position, kind, resource, state, max_attempts, event_id)
		SELECT $1, $2, 0, e.kind, e.resource, 'accepted', 1, e.id FROM converge_events e WHERE e.id = $3`, w, name, ev)
}

func (f *pruneFixture) exists(table, where string, args ...any) bool {
	f.t.Helper()
	var ok bool
	if err := f.pool.QueryRow(f.t.Context(), `SELECT EXISTS (SELECT 1 FROM `+table+` WHERE `+where+`)`, args...).Scan(&ok); err != nil {
		f.t.Fatal(err)
	}
	return ok
}

func (f *pruneFixture) count(table string) int64 {
	f.t.Helper()
	var n int64
	if err := f.pool.QueryRow(f.t.Context(), `SELECT count(*) FROM `+table).Scan(&n); err != nil {
		f.t.Fatal(err)
	}
	return n
}

func newUUID() uuid.UUID { return uuid.Must(uuid.NewV7()) }

func ptr[T any](v T) *T { return &v }

var defaultRetention = converge.Retention{Runs: 30 * day, DeadLetters: 90 * day, WorkflowRuns: 30 * day, Deliveries: 7 * day, Audit: 400 * day}

// TestPruneBoundaries builds every case of SPEC §13's rules at its
// boundary and checks what a pass deletes and keeps, that a dry run
// counts the same without writing, and the pass's one audit entry.
func TestPruneBoundaries(t *testing.T) {
	t.Parallel()
	f := newPruneFixture(t)
	const k, res = "build", "app/a"
	f.stream(k, res, 20, ptr[int64](8))
	pruned := map[string]uuid.UUID{}
	kept := map[string]uuid.UUID{}

	e := f.event(k, res, 1, 32*day, nil)
	f.run(e, 1, "succeeded", 31*day)
	pruned["finished 31 days ago"] = e

	e = f.event(k, res, 2, 31*day, nil)
	f.run(e, 1, "succeeded", 30*day)
	kept["finished exactly at the retention age"] = e

	e = f.event(k, res, 3, 31*day, nil)
	f.run(e, 1, "superseded", 30*day+time.Microsecond)
	pruned["finished a microsecond past the age"] = e

	e = f.event(k, res, 4, 101*day, nil)
	r := f.run(e, 1, "failed", 100*day)
	keptDL := f.deadLetter(e, r, "discarded", day)
	kept["dead letter resolved yesterday"] = e

	e = f.event(k, res, 5, 101*day, nil)
	r = f.run(e, 1, "failed", 100*day)
	prunedDL := f.deadLetter(e, r, "discarded", 100*day)
	pruned["dead letter resolved 100 days ago"] = e

	e = f.event(k, res, 6, 201*day, nil)
	r = f.run(e, 1, "failed", 200*day)
	openDL := f.deadLetter(e, r, "open", 0)
	kept["open dead letter"] = e

	e = f.event(k, res, 7, 101*day, nil)
	r = f.run(e, 1, "failed", 100*day)
	f.deadLetter(e, r, "redriven", 95*day)
	f.run(e, 2, "succeeded", 40*day)
	pruned["redriven long ago, rerun finished 40 days ago"] = e

	e = f.event(k, res, 8, 1000*day, nil)
	f.run(e, 1, "succeeded", 1000*day)
	kept["the applied version's event"] = e

	e = f.event(k, res, 9, 121*day, nil)
	r = f.run(e, 1, "failed", 120*day)
	aloneDL := f.deadLetter(e, r, "redriven", 100*day)
	f.run(e, 2, "succeeded", day)
	kept["rerun finished yesterday (its old dead letter goes alone)"] = e

	e = f.event(k, res, 10, 50*day, nil)
	f.run(e, 1, "failed", 45*day)
	f.run(e, 2, "cancelled", 10*day)
	kept["one run of two finished 10 days ago"] = e

	e = f.event(k, res, 11, 50*day, nil)
	r = f.run(e, 1, "superseded", 45*day)
	f.exec(`UPDATE converge_attempts SET outcome = NULL, finished_at = NULL WHERE run_id = $1`, r)
	kept["superseded 45 days ago, its call still in flight"] = e

	e = f.event(k, res, 20, 3*365*day, nil)
	f.run(e, 1, "succeeded", 3*365*day)
	kept["its stream's latest, years old"] = e

	// Unfinished runs: held, queued, running, on streams of their own
	// (one unfinished run per stream).
	for i, status := range []string{"held", "queued", "running", "retrying"} {
		rs := fmt.Sprintf("app/%s", status)
		f.stream(k, rs, 2, nil)
		e := f.event(k, rs, 1, 400*day, nil)
		f.run(e, 1, status, 399*day)
		kept["a "+status+" run"] = e
		e = f.event(k, rs, 2, 400*day-time.Duration(i)*time.Hour, nil)
		f.run(e, 1, "superseded", 399*day)
		kept["latest beside a "+status+" run"] = e
	}

	// Workflow runs: final and old (pruned with its step's event); final
	// and old but its step's event is its stream's latest (pruned with its
	// step, the event kept: SPEC §13 keeps an event a kept workflow run
	// refers to, not the other way round); without finished_at (kept, and
	// its step's old event too).
	const wk = "deploy"
	f.stream(wk, "prod/a", 9, ptr[int64](9))
	w := f.workflowRun("a", "succeeded", 31*day)
	e = f.event(wk, "prod/a", 1, 32*day, &w)
	f.run(e, 1, "succeeded", 31*day)
	f.step(w, "prod", e)
	pruned["step of a final workflow run"] = e
	prunedWF := w

	w = f.workflowRun("b", "succeeded", 31*day)
	f.stream(wk, "prod/b", 1, ptr[int64](1))
	e = f.event(wk, "prod/b", 1, 32*day, &w)
	f.run(e, 1, "succeeded", 31*day)
	f.step(w, "prod", e)
	kept["step that is its stream's latest"] = e
	aloneWF := w

	w = f.workflowRun("c", "running", 0)
	e = f.event(wk, "prod/a", 2, 300*day, &w)
	f.run(e, 1, "succeeded", 300*day)
	f.step(w, "prod", e)
	kept["step of a workflow run without finished_at"] = e
	openWF := w

	e = f.event(wk, "prod/a", 3, 32*day, nil)
	f.run(e, 1, "succeeded", 31*day)
	pruned["plain event beside workflows"] = e

	// Deliveries and audit entries by age.
	oldDelivery, newDelivery := v7At(f.now.Add(-8*day)), v7At(f.now.Add(-6*day))
	f.exec(`INSERT INTO converge_deliveries (id, source, delivery_id, status, received_at) VALUES ($1, 'gh', 'old', 'ignored', $2), ($3, 'gh', 'new', 'ignored', $4)`,
		oldDelivery, f.now.Add(-8*day), newDelivery, f.now.Add(-6*day))
	oldAudit, newAudit := v7At(f.now.Add(-401*day)), v7At(f.now.Add(-399*day))
	f.exec(`INSERT INTO converge_audit (id, at, actor, role, action) VALUES ($1, $2, 'a', 'operator', 'run.cancel'), ($3, $4, 'a', 'operator', 'run.cancel')`,
		oldAudit, f.now.Add(-401*day), newAudit, f.now.Add(-399*day))

	before := map[string]int64{}
	for _, tbl := range []string{"converge_events", "converge_runs", "converge_attempts", "converge_dead_letters", "converge_workflow_runs"} {
		before[tbl] = f.count(tbl)
	}
	params := store.PruneParams{Retention: defaultRetention, Now: f.now}

	dry := params
	dry.DryRun = true
	plan, err := f.st.Prune(t.Context(), dry)
	if err != nil {
		t.Fatalf("dry run: %v", err)
	}
	for tbl, n := range before {
		if got := f.count(tbl); got != n {
			t.Fatalf("dry run changed %s: %d rows, had %d", tbl, got, n)
		}
	}

	var reported []string
	params.Deleted = func(table string, n int64) { reported = append(reported, fmt.Sprintf("%s:%d", table, n)) }
	done, err := f.st.Prune(t.Context(), params)
	if err != nil {
		t.Fatalf("prune: %v", err)
	}
	want := map[string]int64{"events": 6, "runs": 7, "attempts": 7, "dead_letters": 3, "workflow_runs": 2, "workflow_steps": 2, "deliveries": 1, "audit": 1}
	if !maps.Equal(done.Deleted, want) {
		t.Errorf("prune deleted %v, want %v", done.Deleted, want)
	}
	if !maps.Equal(plan.Deleted, done.Deleted) || !plan.DryRun {
		t.Errorf("dry run counted %v, the pass deleted %v", plan.Deleted, done.Deleted)
	}
	if len(reported) == 0 {
		t.Errorf("Deleted was never called")
	}
	for name, id := range pruned {
		if f.exists("converge_events", "id = $1", id) || f.exists("converge_runs", "event_id = $1", id) {
			t.Errorf("%s: event %s or its runs still there", name, id)
		}
	}
	for name, id := range kept {
		if !f.exists("converge_events", "id = $1", id) || !f.exists("converge_runs", "event_id = $1", id) ||
			!f.exists("converge_attempts a JOIN converge_runs r ON r.id = a.run_id", "r.event_id = $1", id) && !f.exists("converge_runs", "event_id = $1 AND status IN ('held', 'queued')", id) {
			t.Errorf("%s: event %s, its runs or attempts were deleted", name, id)
		}
	}
	for name, dl := range map[string]uuid.UUID{"resolved yesterday": keptDL, "open": openDL} {
		if !f.exists("converge_dead_letters", "id = $1", dl) {
			t.Errorf("dead letter %s was deleted", name)
		}
	}
	for name, dl := range map[string]uuid.UUID{"resolved 100 days ago": prunedDL, "alone, resolved 100 days ago": aloneDL} {
		if f.exists("converge_dead_letters", "id = $1", dl) {
			t.Errorf("dead letter %s was kept", name)
		}
	}
	for name, w := range map[string]uuid.UUID{"with its event": prunedWF, "without its kept event": aloneWF} {
		if f.exists("converge_workflow_runs", "id = $1", w) || f.exists("converge_workflow_steps", "workflow_run_id = $1", w) {
			t.Errorf("the final old workflow run %s or its steps were kept", name)
		}
	}
	if !f.exists("converge_events", "workflow_run_id = $1", aloneWF) {
		t.Errorf("the kept event of the pruned workflow run lost its workflow_run_id")
	}
	if !f.exists("converge_workflow_runs", "id = $1", openWF) || !f.exists("converge_workflow_steps", "workflow_run_id = $1", openWF) {
		t.Errorf("the workflow run without finished_at was deleted")
	}
	if f.exists("converge_deliveries", "id = $1", oldDelivery) || !f.exists("converge_deliveries", "id = $1", newDelivery) {
		t.Errorf("deliveries: the 8-day-old one must go, the 6-day-old one stay")
	}
	if f.exists("converge_audit", "id = $1", oldAudit) || !f.exists("converge_audit", "id = $1", newAudit) {
		t.Errorf("audit: the 401-day-old entry must go, the 399-day-old one stay")
	}
	var actor, role string
	var detail map[string]any
	if err := f.pool.QueryRow(t.Context(), `SELECT actor, role, detail FROM converge_audit WHERE action = 'retention.prune'`).Scan(&actor, &role, &detail); err != nil {
		t.Fatalf("the pass's audit entry: %v", err)
	}
	if actor != "system" {
		t.Errorf("audit actor = %q, want system", actor)
	}
	if got := fmt.Sprint(detail["deleted"]); got != fmt.Sprint(map[string]any{"events": 6, "runs": 7, "attempts": 7, "dead_letters": 3,
		"workflow_runs": 2, "workflow_steps": 2, "deliveries": 1, "audit": 1}) {
		t.Errorf("audit detail deleted = %s", got)
	}

	// A second pass finds nothing and writes no audit entry.
	again, err := f.st.Prune(t.Context(), store.PruneParams{Retention: defaultRetention, Now: f.now})
	if err != nil || again.Total != 0 {
		t.Fatalf("second pass = %+v, %v; want nothing deleted", again, err)
	}
	var entries int
	if err := f.pool.QueryRow(t.Context(), `SELECT count(*) FROM converge_audit WHERE action = 'retention.prune'`).Scan(&entries); err != nil || entries != 1 {
		t.Fatalf("retention.prune entries = %d (%v), want 1", entries, err)
	}

	// The pruned workflow run's kept event goes as a plain one once its
	// stream has moved on.
	f.exec(`UPDATE converge_streams SET latest_version = 2, applied_version = 2 WHERE kind = $1 AND resource = 'prod/b'`, wk)
	e = f.event(wk, "prod/b", 2, 20*day, nil)
	f.run(e, 1, "succeeded", 20*day)
	third, err := f.st.Prune(t.Context(), store.PruneParams{Retention: defaultRetention, Now: f.now})
	if err != nil || third.Deleted["events"] != 1 || f.exists("converge_events", "workflow_run_id = $1", aloneWF) {
		t.Fatalf("third pass = %+v, %v; want the pruned workflow run's event deleted", third, err)
	}
}

// TestPruneBatches prunes 2,501 events in batches of 1000 (the last
// event is its stream's latest and stays).
func TestPruneBatches(t *testing.T) {
	t.Parallel()
	f := newPruneFixture(t)
	const n = 2501
	f.stream("build", "app/b", n, nil)
	at := f.now.Add(-40 * day)
	ids := make([]uuid.UUID, n)
	for i := range ids {
		ids[i] = v7At(at.Add(time.Duration(i) * time.Millisecond))
	}
	f.exec(`INSERT INTO converge_events (id, kind, resource, version, payload, received_at)
		SELECT id, 'build', 'app/b', v, '{}', $2 FROM unnest($1::uuid[]) WITH ORDINALITY AS x (id, v)`, ids, at)
	f.exec(`INSERT INTO converge_runs (id, event_id, number, kind, resource, version, status, max_attempts, created_at, finished_at)
		SELECT gen_random_uuid(), e.id, 1, e.kind, e.resource, e.version, 'succeeded', 1, $1, $1 FROM converge_events e`, at)
	res, err := f.st.Prune(t.Context(), store.PruneParams{Retention: defaultRetention, Now: f.now})
	if err != nil {
		t.Fatal(err)
	}
	if res.Deleted["events"] != n-1 || res.Deleted["runs"] != n-1 || res.Batches != 3 {
		t.Fatalf("prune = %+v, want %d events and runs in 3 batches", res, n-1)
	}
	if got := f.count("converge_events"); got != 1 {
		t.Fatalf("events left = %d, want the latest", got)
	}
}

// TestPruneLease: a pass holding the lease keeps another from running;
// once it expires another pass takes it over.
func TestPruneLease(t *testing.T) {
	t.Parallel()
	f := newPruneFixture(t)
	f.exec(`UPDATE converge_prune_lease SET holder = gen_random_uuid(), expires_at = now() + interval '1 hour'`)
	held, err := f.st.PruneLeaseHeld(t.Context())
	if err != nil || !held {
		t.Fatalf("lease held = %v, %v", held, err)
	}
	if _, err := f.st.Prune(t.Context(), store.PruneParams{Retention: defaultRetention}); !errors.Is(err, store.ErrPruneBusy) {
		t.Fatalf("prune under another's lease = %v, want ErrPruneBusy", err)
	}
	// A dry run writes nothing and needs no lease.
	if _, err := f.st.Prune(t.Context(), store.PruneParams{Retention: defaultRetention, DryRun: true}); err != nil {
		t.Fatalf("dry run under another's lease: %v", err)
	}
	f.exec(`UPDATE converge_prune_lease SET expires_at = now() - interval '1 second'`)
	if _, err := f.st.Prune(t.Context(), store.PruneParams{Retention: defaultRetention}); err != nil {
		t.Fatalf("prune after the lease expired: %v", err)
	}
	if held, err := f.st.PruneLeaseHeld(t.Context()); err != nil || held {
		t.Fatalf("lease held after the pass = %v, %v; want released", held, err)
	}
}

// TestPruneLeaseHeldThroughABatch: a batch holds the lease however long
// it takes: with a lease of 100 ms and a batch stalled behind a table
// lock for longer, another pass is refused (it used to find the lease
// expired and run beside it), and without waiting for the batch.
func TestPruneLeaseHeldThroughABatch(t *testing.T) {
	t.Parallel()
	f := newPruneFixture(t)
	at := f.now.Add(-500 * day)
	f.exec(`INSERT INTO converge_audit (id, at, actor, role, action) VALUES ($1, $2, 'a', 'operator', 'run.cancel')`, v7At(at), at)
	ctx := t.Context()
	lock, err := f.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lock.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := lock.Exec(ctx, `LOCK TABLE converge_audit IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	onlyAudit := converge.Retention{Audit: 400 * day}
	first := make(chan error, 1)
	go func() {
		res, err := f.st.Prune(ctx, store.PruneParams{Retention: onlyAudit, Now: f.now, LeaseTTL: 100 * time.Millisecond})
		if err == nil && res.Deleted["audit"] != 1 {
			err = fmt.Errorf("deleted %v, want the one old audit entry", res.Deleted)
		}
		first <- err
	}()
	// The first pass is in its batch, waiting for the lock, once it holds
	// the lease; then let its lease run out.
	deadline := time.Now().Add(10 * time.Second)
	for {
		var waiting bool
		if err := f.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE datname = current_database()
			AND wait_event_type = 'Lock' AND query LIKE '%converge_audit%')`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first pass never waited for the audit table")
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond)
	start := time.Now()
	// (A second pass that took the lease would wait for the table lock:
	// its context ends first.)
	second, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := f.st.Prune(second, store.PruneParams{Retention: onlyAudit, Now: f.now, LeaseTTL: 100 * time.Millisecond}); !errors.Is(err, store.ErrPruneBusy) {
		t.Fatalf("a second pass while the first's batch ran past its lease = %v, want ErrPruneBusy", err)
	}
	if waited := time.Since(start); waited > time.Second {
		t.Errorf("the second pass waited %v for the first's batch", waited)
	}
	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-first; err != nil {
		t.Fatalf("the first pass: %v", err)
	}
}

// TestPruneDryRunWithoutRuns: a dry run with runs kept forever but
// workflow runs not counts as the pass deletes (its query named no id).
func TestPruneDryRunWithoutRuns(t *testing.T) {
	t.Parallel()
	f := newPruneFixture(t)
	for _, r := range []converge.Retention{{WorkflowRuns: 30 * day}, {WorkflowRuns: 30 * day, DeadLetters: day, Audit: day}} {
		dry, err := f.st.Prune(t.Context(), store.PruneParams{Retention: r, Now: f.now, DryRun: true})
		if err != nil {
			t.Fatalf("dry run with %+v: %v", r, err)
		}
		res, err := f.st.Prune(t.Context(), store.PruneParams{Retention: r, Now: f.now})
		if err != nil {
			t.Fatal(err)
		}
		if dry.Total != res.Total {
			t.Errorf("dry run counted %d, the pass deleted %d", dry.Total, res.Total)
		}
	}
}

// TestPruneZeroKeepsForever: ages of 0 delete nothing of their kind.
func TestPruneZeroKeepsForever(t *testing.T) {
	t.Parallel()
	f := newPruneFixture(t)
	f.stream("build", "app/z", 5, nil)
	e := f.event("build", "app/z", 1, 1000*day, nil)
	r := f.run(e, 1, "failed", 999*day)
	f.deadLetter(e, r, "discarded", 998*day)
	f.exec(`INSERT INTO converge_audit (id, at, actor, role, action) VALUES ($1, $2, 'a', 'operator', 'run.cancel')`, v7At(f.now.Add(-900*day)), f.now.Add(-900*day))
	res, err := f.st.Prune(t.Context(), store.PruneParams{Retention: converge.Retention{}, Now: f.now})
	if err != nil || res.Total != 0 {
		t.Fatalf("prune with every age 0 = %+v, %v; want nothing", res, err)
	}
	// Runs kept forever, dead letters not: the dead letter goes alone.
	res, err = f.st.Prune(t.Context(), store.PruneParams{Retention: converge.Retention{DeadLetters: day}, Now: f.now})
	if err != nil || res.Total != 1 || res.Deleted["dead_letters"] != 1 {
		t.Fatalf("prune with dead_letters 1d only = %+v, %v; want the dead letter alone", res, err)
	}
	if !f.exists("converge_events", "id = $1", e) {
		t.Fatal("the event went with runs kept forever")
	}
}

// TestPruneReplayIsStale: a replay of a pruned event is 409 stale-version;
// of a kept one, 200 as before.
func TestPruneReplayIsStale(t *testing.T) {
	t.Parallel()
	f := newPruneFixture(t)
	f.stream("build", "app/r", 2, ptr[int64](2))
	e1 := f.event("build", "app/r", 1, 40*day, nil)
	f.run(e1, 1, "succeeded", 40*day)
	e2 := f.event("build", "app/r", 2, 40*day, nil)
	f.run(e2, 1, "succeeded", 40*day)
	if _, err := f.st.Prune(t.Context(), store.PruneParams{Retention: defaultRetention, Now: f.now}); err != nil {
		t.Fatal(err)
	}
	accept := func(v int64) (*converge.EventAcceptResult, error) {
		return f.st.EventAccept(t.Context(), store.EventAcceptParams{
			EventSubmission: converge.EventSubmission{Kind: "build", Resource: "app/r", Version: v, Payload: []byte(`{}`)}, MaxAttempts: 3})
	}
	_, err := accept(1)
	var ae *converge.AppError
	if !errors.As(err, &ae) || ae.Code != converge.ESTALEVERSION || ae.LatestVersion == nil || *ae.LatestVersion != 2 {
		t.Fatalf("replay of the pruned event = %v, want stale-version with latest 2", err)
	}
	res, err := accept(2)
	if err != nil || !res.Replay || res.Event.ID != e2 {
		t.Fatalf("replay of the kept latest event = %+v, %v; want 200 with the original", res, err)
	}
}

// TestPruneDatabaseRefuses: outside the prune path the database refuses
// every delete of events, runs, finished attempts, workflow runs and
// steps, deliveries and audit entries; on it, it still refuses a run that
// is not terminal (held, queued, running, retrying), an attempt in
// flight, a workflow run without finished_at and an open dead letter.
func TestPruneDatabaseRefuses(t *testing.T) {
	t.Parallel()
	f := newPruneFixture(t)
	f.stream("build", "app/d", 1, nil)
	e := f.event("build", "app/d", 1, 100*day, nil)
	r := f.run(e, 1, "failed", 99*day)
	f.deadLetter(e, r, "open", 0)
	unfinished := map[string]uuid.UUID{}
	for _, st := range []string{"held", "queued", "running", "retrying"} {
		rs := "app/u-" + st
		f.stream("build", rs, 1, nil)
		unfinished[st] = f.run(f.event("build", rs, 1, 100*day, nil), 1, st, 99*day)
	}
	openWF := f.workflowRun("x", "running", 0)
	ev := f.event("deploy", "prod/x", 1, 100*day, &openWF)
	f.step(openWF, "prod", ev)
	finalWF := f.workflowRun("y", "succeeded", 100*day)
	f.exec(`INSERT INTO converge_deliveries (id, source, delivery_id, status) VALUES ($1, 'gh', 'd1', 'ignored')`, newUUID())
	f.exec(`INSERT INTO converge_audit (id, actor, role, action) VALUES ($1, 'a', 'operator', 'run.cancel')`, newUUID())

	refused := func(pruning bool, sql string, args ...any) {
		t.Helper()
		tx, err := f.pool.Begin(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(context.WithoutCancel(t.Context())) }()
		if pruning {
			if _, err := tx.Exec(t.Context(), `SELECT set_config('converge.pruning', 'on', true)`); err != nil {
				t.Fatal(err)
			}
		}
		_, err = tx.Exec(t.Context(), sql, args...)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "CV006" {
			t.Errorf("pruning=%v %q %v: error %v, want SQLSTATE CV006", pruning, sql, args, err)
		}
	}
	refused(false, `DELETE FROM converge_runs WHERE id = $1`, r)
	refused(false, `DELETE FROM converge_attempts WHERE run_id = $1`, r)
	refused(false, `DELETE FROM converge_events WHERE id = $1`, e)
	refused(false, `DELETE FROM converge_workflow_runs WHERE id = $1`, finalWF)
	refused(false, `DELETE FROM converge_workflow_steps WHERE workflow_run_id = $1`, openWF)
	refused(false, `DELETE FROM converge_deliveries`)
	refused(false, `DELETE FROM converge_audit`)
	for _, st := range slices.Sorted(maps.Keys(unfinished)) {
		refused(true, `DELETE FROM converge_runs WHERE id = $1`, unfinished[st])
	}
	refused(true, `DELETE FROM converge_attempts WHERE run_id = $1 AND outcome IS NULL`, unfinished["running"])
	refused(true, `DELETE FROM converge_workflow_runs WHERE id = $1`, openWF)
	refused(true, `DELETE FROM converge_workflow_steps WHERE workflow_run_id = $1`, openWF)
	refused(true, `DELETE FROM converge_dead_letters WHERE run_id = $1`, r)
	// A pass with everything at age 1µs deletes none of them either.
	res, err := f.st.Prune(t.Context(), store.PruneParams{Retention: converge.Retention{Runs: time.Microsecond, DeadLetters: time.Microsecond,
		WorkflowRuns: time.Microsecond}, Now: f.now})
	if err != nil {
		t.Fatal(err)
	}
	if res.Deleted["runs"] != 0 || res.Deleted["workflow_runs"] != 1 || f.count("converge_runs") != 5 {
		t.Fatalf("prune = %v; want only the final workflow run without events deleted, every run kept", res.Deleted)
	}
	// An in-flight attempt may still be taken back (a worker shutting down).
	f.exec(`DELETE FROM converge_attempts WHERE run_id = $1 AND outcome IS NULL`, unfinished["running"])
}
