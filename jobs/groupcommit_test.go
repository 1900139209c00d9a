package jobs_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/jobs"
	"github.com/converge-run/converge/store"
	"github.com/converge-run/converge/test/pgtest"
	"github.com/converge-run/converge/test/testkit"
)

// concurrently runs fn(i) for i in 0..n-1 at once (released together) and
// waits for all.
func concurrently(n int, fn func(i int)) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			fn(i)
		})
	}
	close(start)
	wg.Wait()
}

// batchStore is the store with its hot calls group-committed, as the
// worker and the API make them.
type batchStore struct {
	*store.Store
	gc *jobs.GroupCommit
}

func (b *batchStore) EventAccept(ctx context.Context, p store.EventAcceptParams) (*converge.EventAcceptResult, error) {
	return b.gc.EventAccept(ctx, p)
}

func (b *batchStore) AttemptBegin(ctx context.Context, runID uuid.UUID, jobID int64, leaseTTL time.Duration) (*converge.AttemptTicket, error) {
	return b.gc.AttemptBegin(ctx, runID, jobID, leaseTTL)
}

func (b *batchStore) AttemptFinish(ctx context.Context, p store.AttemptFinishParams) (*store.AttemptFinishResult, error) {
	return b.gc.AttemptFinish(ctx, p)
}

func (b *batchStore) AttemptFinishLater(p store.AttemptFinishParams, then func(*store.AttemptFinishResult, error)) {
	b.gc.AttemptFinishLater(p, time.Now().Add(time.Minute), then)
}

func (b *batchStore) Drain(ctx context.Context) error { return b.gc.Drain(ctx) }

func (b *batchStore) GroupedBatches() (accepts, begins, finishes int64) { return b.gc.GroupedBatches() }

func newBatchStore(t *testing.T) (*batchStore, *pgxpool.Pool) {
	t.Helper()
	pool := pgtest.OpenPool(t, pgtest.NewDatabase(t), 20)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		t.Fatalf("river client: %v", err)
	}
	st := store.New(pool, client)
	gc := jobs.NewGroupCommit(st, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	t.Cleanup(func() {
		if n := gc.Fallbacks(); n != 0 {
			t.Logf("%d batches fell back to calls one by one", n)
		}
	})
	return &batchStore{Store: st, gc: gc}, pool
}

func accept(t *testing.T, st *batchStore, kind, resource string, version int64, payload string) (*converge.EventAcceptResult, error) {
	t.Helper()
	return st.EventAccept(t.Context(), store.EventAcceptParams{
		EventSubmission: converge.EventSubmission{Kind: kind, Resource: resource, Version: version, Payload: json.RawMessage(payload)},
		MaxAttempts:     5,
	})
}

// runJobID is the River job of run id, as the store recorded it.
func runJobID(t *testing.T, pool *pgxpool.Pool, id uuid.UUID) int64 {
	t.Helper()
	var job int64
	if err := pool.QueryRow(t.Context(), `SELECT job_id FROM converge_runs WHERE id = $1`, id).Scan(&job); err != nil {
		t.Fatal(err)
	}
	return job
}

func appCode(err error) string {
	var ae *converge.AppError
	if errors.As(err, &ae) {
		return ae.Code
	}
	return fmt.Sprintf("not an AppError: %v", err)
}

// TestGroupCommitAccept: events accepted concurrently, and so committed in
// shared transactions, get each the answer they would get alone: new
// versions are accepted (superseding the stream's unfinished run), equal
// replays return the original, conflicts and stale versions are refused,
// and a payload PostgreSQL refuses fails only its own request.
func TestGroupCommitAccept(t *testing.T) {
	t.Parallel()
	st, pool := newBatchStore(t)
	ctx := t.Context()

	// Eleven streams at version 5, each with an unfinished run.
	prior := make([]*converge.EventAcceptResult, 11)
	for i := range prior {
		res, err := accept(t, st, "build", fmt.Sprintf("old/%d", i), 5, `{"v": 5}`)
		if err != nil {
			t.Fatal(err)
		}
		prior[i] = res
	}

	type want struct {
		code       string // "" for success
		replay     bool
		superseded bool
	}
	type req struct {
		resource string
		version  int64
		payload  string
		want     want
	}
	var reqs []req
	for i := range 40 {
		reqs = append(reqs, req{fmt.Sprintf("new/%d", i), 1, fmt.Sprintf(`{"n": %d}`, i), want{}})
	}
	for i := range 4 {
		reqs = append(reqs, req{fmt.Sprintf("old/%d", i), 6, `{"v": 6}`, want{superseded: true}})
	}
	reqs = append(reqs,
		req{"old/4", 5, `{"v": 5}`, want{replay: true}},
		req{"old/5", 5, `{"v":5}`, want{replay: true}}, // equal as JSON
		req{"old/6", 5, `{"v": 55}`, want{code: converge.EVERSIONCONFLICT}},
		req{"old/7", 5, `{"w": 5}`, want{code: converge.EVERSIONCONFLICT}},
		req{"old/8", 3, `{"v": 3}`, want{code: converge.ESTALEVERSION}},
		req{"old/9", 4, `{"v": 4}`, want{code: converge.ESTALEVERSION}},
		// A lone surrogate: valid JSON, refused by jsonb. Its batch fails
		// and every request of it is redone alone.
		req{"bad/0", 1, `{"s": "\ud800"}`, want{code: converge.EINVALID}},
		// The same, stale: the lookup of the stored version fails on it.
		req{"old/10", 2, `{"s": "\ud800"}`, want{code: converge.EINVALID}},
	)

	results := make([]*converge.EventAcceptResult, len(reqs))
	errs := make([]error, len(reqs))
	// run sends reqs[i] for i in idx concurrently.
	run := func(idx []int) {
		concurrently(len(idx), func(j int) {
			i := idx[j]
			results[i], errs[i] = accept(t, st, "build", reqs[i].resource, reqs[i].version, reqs[i].payload)
		})
	}
	// check checks the answers to reqs[i] for i in idx.
	check := func(idx []int) {
		for _, i := range idx {
			r := reqs[i]
			res, err := results[i], errs[i]
			if r.want.code != "" {
				if got := appCode(err); got != r.want.code {
					t.Errorf("%s@%d: error %q, want %s", r.resource, r.version, got, r.want.code)
				}
				continue
			}
			if err != nil {
				t.Errorf("%s@%d: %v", r.resource, r.version, err)
				continue
			}
			old := prior[0]
			if _, err := fmt.Sscanf(r.resource, "old/%d", new(int)); err == nil {
				var n int
				_, _ = fmt.Sscanf(r.resource, "old/%d", &n)
				old = prior[n]
			}
			switch {
			case r.want.replay:
				if !res.Replay || res.Event.ID != old.Event.ID || res.Run.ID != old.Run.ID {
					t.Errorf("%s@%d: replay %v event %s run %s, want the original %s %s", r.resource, r.version, res.Replay, res.Event.ID, res.Run.ID, old.Event.ID, old.Run.ID)
				}
			default:
				if res.Replay || res.Event.Version != r.version || res.Event.Resource != r.resource || res.Run.Status != converge.RunQueued ||
					res.Run.EventID != res.Event.ID || res.Event.Status != converge.RunQueued || res.Event.ReceivedAt.IsZero() {
					t.Errorf("%s@%d: got %+v / %+v", r.resource, r.version, res.Event, res.Run)
				}
				wantSup := []uuid.UUID{}
				if r.want.superseded {
					wantSup = []uuid.UUID{old.Run.ID}
				}
				if fmt.Sprint(res.SupersededRuns) != fmt.Sprint(wantSup) {
					t.Errorf("%s@%d: superseded %v, want %v", r.resource, r.version, res.SupersededRuns, wantSup)
				}
			}
		}
	}
	// First every request that PostgreSQL accepts, together: batches of
	// them must commit. A batch counts only once it committed, so this
	// fails if the set-based path fails.
	var valid, again []int
	for i, r := range reqs {
		if r.want.code != converge.EINVALID {
			valid = append(valid, i)
		}
		// The requests that change nothing (replays, conflicts, stale
		// versions) are sent again with those it refuses.
		if r.want.code != "" || r.want.replay {
			again = append(again, i)
		}
	}
	run(valid)
	check(valid)
	if accepts, _, _ := st.GroupedBatches(); accepts == 0 {
		t.Errorf("no accepts were committed together: the batch path was not exercised")
	}
	// Then the payloads PostgreSQL refuses, together with requests that
	// change nothing: a refused payload fails its batch, whose calls are
	// redone alone, and only its own request.
	run(again)
	check(again)

	// The database agrees: one event per accepted version, one unfinished
	// run per stream, the superseded runs' jobs cancelled, nothing of the
	// refused requests.
	var events, unfinished, superseded, cancelledJobs, bad int
	err := pool.QueryRow(ctx, `SELECT
			(SELECT count(*) FROM converge_events),
			(SELECT count(*) FROM converge_runs WHERE status IN ('queued', 'running', 'retrying')),
			(SELECT count(*) FROM converge_runs WHERE status = 'superseded'),
			(SELECT count(*) FROM river_job j JOIN converge_runs r ON r.job_id = j.id WHERE r.status = 'superseded' AND j.state = 'cancelled'),
			(SELECT count(*) FROM converge_streams WHERE resource LIKE 'bad/%' AND latest_version > 0)`).
		Scan(&events, &unfinished, &superseded, &cancelledJobs, &bad)
	if err != nil {
		t.Fatal(err)
	}
	if events != 11+40+4 || unfinished != 51 || superseded != 4 || cancelledJobs != 4 || bad != 0 {
		t.Errorf("events %d (want 55), unfinished runs %d (want 51), superseded %d and their cancelled jobs %d (want 4), bad streams raised %d (want 0)",
			events, unfinished, superseded, cancelledJobs, bad)
	}
}

// TestGroupCommitAttempts: attempts begun and finished concurrently (in
// shared transactions) take and release their streams' leases, record
// their attempts and move their runs as one by one; a job that no longer
// drives its run is told to do nothing.
func TestGroupCommitAttempts(t *testing.T) {
	t.Parallel()
	st, pool := newBatchStore(t)
	ctx := t.Context()
	const n = 40
	runs := make([]*converge.Run, n)
	jobs := make([]int64, n)
	for i := range n {
		res, err := accept(t, st, "deploy", fmt.Sprintf("app/%d", i), 7, `{}`)
		if err != nil {
			t.Fatal(err)
		}
		runs[i] = res.Run
		jobs[i] = runJobID(t, pool, res.Run.ID)
	}
	const ttl = time.Minute

	// Begin all at once; every fifth with a job that is not its run's.
	tickets := make([]*converge.AttemptTicket, n)
	errs := make([]error, n)
	before := time.Now()
	concurrently(n, func(i int) {
		job := jobs[i]
		if i%5 == 4 {
			job = -job
		}
		tickets[i], errs[i] = st.AttemptBegin(ctx, runs[i].ID, job, ttl)
	})
	for i, tk := range tickets {
		if errs[i] != nil {
			t.Fatalf("begin %d: %v", i, errs[i])
		}
		if i%5 == 4 {
			if tk.Decision != converge.DecisionDone {
				t.Errorf("begin %d with a stale job: decision %v, want done", i, tk.Decision)
			}
			continue
		}
		if tk.Decision != converge.DecisionCall || tk.Attempt != 1 || tk.Run == nil || tk.Run.ID != runs[i].ID ||
			tk.Run.Status != converge.RunRunning || tk.Run.Attempts != 1 || string(tk.Payload) != `{}` {
			t.Errorf("begin %d: %+v", i, tk)
			continue
		}
		if tk.LeaseFrom.Before(before.Add(-time.Second)) || tk.LeaseFrom.After(time.Now()) {
			t.Errorf("begin %d: lease from %v, not within the call", i, tk.LeaseFrom)
		}
	}
	// A second begin while the lease is held waits.
	if tk, err := st.AttemptBegin(ctx, runs[0].ID, jobs[0], ttl); err != nil || tk.Decision != converge.DecisionWait {
		t.Errorf("begin while held: %+v, %v; want wait", tk, err)
	}

	// Finish all at once: i%5 == 0 fails transiently, the others succeed.
	results := make([]*store.AttemptFinishResult, n)
	concurrently(n, func(i int) {
		if i%5 == 4 {
			return
		}
		p := store.AttemptFinishParams{Run: tickets[i].Run, Attempt: 1, Started: time.Now(), Output: json.RawMessage(fmt.Sprintf(`{"i": %d}`, i)),
			Backoff: converge.Backoff{Initial: time.Second, Max: time.Minute}}
		if i%5 == 0 {
			p.Err, p.Output = &converge.Error{Class: converge.ClassTransient, Message: "503"}, nil
		}
		results[i], errs[i] = st.AttemptFinish(ctx, p)
	})
	for i := range n {
		if i%5 == 4 {
			continue
		}
		if errs[i] != nil {
			t.Fatalf("finish %d: %v", i, errs[i])
		}
		var status, outcome string
		var applied *int64
		var leased bool
		var output *string
		err := pool.QueryRow(ctx, `SELECT r.status, a.outcome, s.applied_version, s.lease_run_id IS NOT NULL, r.output::text
			FROM converge_runs r JOIN converge_attempts a ON a.run_id = r.id AND a.number = 1
			JOIN converge_streams s ON s.kind = r.kind AND s.resource = r.resource WHERE r.id = $1`, runs[i].ID).
			Scan(&status, &outcome, &applied, &leased, &output)
		if err != nil {
			t.Fatal(err)
		}
		if leased {
			t.Errorf("finish %d: the stream's lease is still held", i)
		}
		if i%5 == 0 {
			if results[i].Status != converge.RunRetrying || results[i].RetryIn <= 0 || status != "retrying" || outcome != "transient_error" || applied != nil {
				t.Errorf("finish %d (transient): result %+v, run %s, attempt %s, applied %v", i, results[i], status, outcome, applied)
			}
			continue
		}
		if results[i].Status != converge.RunSucceeded || status != "succeeded" || outcome != "succeeded" || applied == nil || *applied != 7 ||
			output == nil || *output != fmt.Sprintf(`{"i": %d}`, i) {
			t.Errorf("finish %d: result %+v, run %s, attempt %s, applied %v, output %v", i, results[i], status, outcome, applied, output)
		}
	}
	// A result that comes again is not recorded twice.
	again, err := st.AttemptFinish(ctx, store.AttemptFinishParams{Run: tickets[1].Run, Attempt: 1, Started: time.Now()})
	if err != nil || again.Status != converge.RunSucceeded {
		t.Errorf("finish again: %+v, %v", again, err)
	}
	if _, begins, finishes := st.GroupedBatches(); begins == 0 || finishes == 0 {
		t.Errorf("begins grouped %d times, finishes %d: the batch paths were not exercised", begins, finishes)
	}
}

// TestDebounce: every fresh version has its run's first attempt held back
// until the kind's debounce after its acceptance (SPEC §6), on a quiet
// stream as in a burst, alone and in a batch: AttemptBegin waits it out
// without using an attempt. With debounce off a run starts at once; a run
// held at acceptance (quarantine) is not scheduled at all.
func TestDebounce(t *testing.T) {
	t.Parallel()
	st, pool := newBatchStore(t)
	ctx := t.Context()
	const debounce = 300 * time.Millisecond
	acceptD := func(resource string, version int64, d time.Duration) *converge.EventAcceptResult {
		t.Helper()
		res, err := st.EventAccept(ctx, store.EventAcceptParams{
			EventSubmission: converge.EventSubmission{Kind: "deploy", Resource: resource, Version: version, Payload: json.RawMessage(`{}`)},
			MaxAttempts:     3, Debounce: d,
		})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	begin := func(res *converge.EventAcceptResult) *converge.AttemptTicket {
		t.Helper()
		job := runJobID(t, pool, res.Run.ID)
		tk, err := st.AttemptBegin(ctx, res.Run.ID, job, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		return tk
	}
	// held says whether res's run is held back the debounce after its
	// acceptance (next_attempt_at is read from the clock after
	// received_at, in the same statement sequence).
	held := func(res *converge.EventAcceptResult) bool {
		if res.Run.NextAttemptAt == nil {
			return false
		}
		d := res.Run.NextAttemptAt.Sub(res.Event.ReceivedAt)
		return d >= debounce && d < debounce+time.Second
	}

	// Quiet stream, never seen before: held back all the same.
	first := acceptD("quiet", 1, debounce)
	if !held(first) {
		t.Fatalf("first version of a stream: next attempt at %v, accepted %v; want the debounce %v after", first.Run.NextAttemptAt,
			first.Event.ReceivedAt, debounce)
	}
	if tk := begin(first); tk.Decision == converge.DecisionCall {
		if time.Now().Before(*first.Run.NextAttemptAt) {
			t.Fatalf("first version called before its debounce ended (%v)", first.Run.NextAttemptAt)
		}
		t.Logf("first version begun after its debounce had passed (a loaded machine): rightly called")
	} else if tk.Decision != converge.DecisionWait || tk.Wait <= 0 || tk.Wait > debounce {
		t.Fatalf("first version within the debounce: %+v, want wait up to %v", tk, debounce)
	} else {
		var attempts int
		if err := pool.QueryRow(ctx, `SELECT attempts FROM converge_runs WHERE id = $1`, first.Run.ID).Scan(&attempts); err != nil || attempts != 0 {
			t.Errorf("waiting cost %d attempts (%v)", attempts, err)
		}
	}
	// Debounce off: at once.
	off := acceptD("quiet", 2, 0)
	if off.Run.NextAttemptAt != nil {
		t.Errorf("debounce off: held back until %v", off.Run.NextAttemptAt)
	}
	if tk := begin(off); tk.Decision != converge.DecisionCall {
		t.Errorf("debounce off: decision %v, want call", tk.Decision)
	}
	// A stream after a long pause (its previous version accepted more
	// than the debounce before): held back. (Not "quiet", whose lease
	// the call above holds.)
	acceptD("paused", 1, 0)
	if _, err := pool.Exec(ctx, `UPDATE converge_streams SET latest_at = now() - interval '1 hour' WHERE kind = 'deploy' AND resource = 'paused'`); err != nil {
		t.Fatal(err)
	}
	second := acceptD("paused", 2, debounce)
	if !held(second) {
		t.Errorf("version after a pause: next attempt at %v, accepted %v; want the debounce after", second.Run.NextAttemptAt, second.Event.ReceivedAt)
	}
	// A quarantined stream's run is held and gets no job, so it has
	// nothing to wait out: it is scheduled when it is released.
	if _, err := pool.Exec(ctx, `INSERT INTO converge_streams (kind, resource, latest_version, quarantined_at) VALUES ('deploy', 'quarantined', 0, now())`); err != nil {
		t.Fatal(err)
	}
	if q := acceptD("quarantined", 1, debounce); q.Run.Status != converge.RunHeld || q.Run.NextAttemptAt != nil {
		t.Errorf("quarantined stream: run %s, next attempt at %v; want held, none", q.Run.Status, q.Run.NextAttemptAt)
	}
	// Released, it starts at once: a release is an operator's single
	// action, not a burst.
	rel, err := st.QuarantineRelease(ctx, "deploy", "quarantined", converge.AuditEntry{Actor: "test", Role: "admin"})
	if err != nil || rel.Run == nil {
		t.Fatalf("release: %+v, %v", rel, err)
	}
	if rel.Run.Status != converge.RunQueued || rel.Run.NextAttemptAt != nil {
		t.Errorf("released run: %s, next attempt at %v; want queued at once", rel.Run.Status, rel.Run.NextAttemptAt)
	}
	if state := jobStateOf(t, pool, rel.Run.ID); state != "available" {
		t.Errorf("released run's job is %s, want available", state)
	}

	// Fresh streams accepted concurrently (group-committed together):
	// every one held back.
	accepts, _, _ := st.GroupedBatches()
	results := make([]*converge.EventAcceptResult, 10)
	concurrently(len(results), func(i int) { results[i] = acceptD(fmt.Sprintf("many/%d", i), 1, debounce) })
	for i, res := range results {
		if !held(res) {
			t.Errorf("many/%d: next attempt at %v, accepted %v; want the debounce after", i, res.Run.NextAttemptAt, res.Event.ReceivedAt)
		}
	}
	if after, _, _ := st.GroupedBatches(); after == accepts {
		t.Logf("the concurrent accepts were not grouped (each alone); the batch path is held to the same rows by TestAcceptBeginFinishDifferential")
	}
	// The held run's job waits in River as scheduled; JobsPromote makes it
	// available once its time has come, and not before.
	jobState := func(res *converge.EventAcceptResult) string {
		t.Helper()
		return jobStateOf(t, pool, res.Run.ID)
	}
	if _, err := pool.Exec(ctx, `UPDATE river_job SET state = 'scheduled', scheduled_at = now() + interval '1 hour' WHERE id = (SELECT job_id FROM converge_runs WHERE id = $1)`, results[0].Run.ID); err != nil {
		t.Fatal(err)
	}
	if state := jobState(results[1]); state != "scheduled" {
		t.Errorf("a debounced run's job is %s, want scheduled", state)
	}
	// Promote until every debounced job (second's, and all of results but
	// results[0]'s, due in an hour) has come due and been made available.
	var promoted int64
	testkit.Eventually(t, 10*time.Second, func() (bool, string) {
		n, err := st.JobsPromote(ctx, []string{"deploy"})
		if err != nil {
			t.Fatalf("promote: %v", err)
		}
		promoted += n
		for _, res := range append([]*converge.EventAcceptResult{second}, results[1:]...) {
			if state := jobState(res); state != "available" {
				return false, fmt.Sprintf("after promoting %d jobs, the job of %s is %s", promoted, res.Event.Resource, state)
			}
		}
		return true, ""
	})
	if promoted < int64(len(results)-1) {
		t.Errorf("promoted %d jobs, want at least %d", promoted, len(results)-1)
	}
	if a, b := jobState(results[1]), jobState(results[0]); a != "available" || b != "scheduled" {
		t.Errorf("after promotion: a due job is %s (want available), one due in an hour %s (want scheduled)", a, b)
	}
	if tk := begin(second); tk.Decision != converge.DecisionCall || tk.Attempt != 1 {
		t.Errorf("after the debounce: %+v, want call of attempt 1", tk)
	}
}

// jobStateOf is the River state of run id's job.
func jobStateOf(t *testing.T, pool *pgxpool.Pool, id uuid.UUID) string {
	t.Helper()
	var state string
	if err := pool.QueryRow(t.Context(), `SELECT j.state FROM river_job j JOIN converge_runs r ON r.job_id = j.id WHERE r.id = $1`, id).Scan(&state); err != nil {
		t.Fatal(err)
	}
	return state
}

// TestAttemptFinishLater: an outcome recorded in the background is
// committed by the time Drain returns, and its callback has run.
func TestAttemptFinishLater(t *testing.T) {
	t.Parallel()
	st, pool := newBatchStore(t)
	ctx := t.Context()
	const n = 20
	runs := make([]*converge.Run, n)
	for i := range n {
		res, err := accept(t, st, "build", fmt.Sprintf("later/%d", i), 1, `{}`)
		if err != nil {
			t.Fatal(err)
		}
		job := runJobID(t, pool, res.Run.ID)
		tk, err := st.AttemptBegin(ctx, res.Run.ID, job, time.Minute)
		if err != nil || tk.Decision != converge.DecisionCall {
			t.Fatalf("begin: %+v, %v", tk, err)
		}
		runs[i] = tk.Run
	}
	var mu sync.Mutex
	statuses := map[uuid.UUID]converge.RunStatus{}
	for _, run := range runs {
		st.AttemptFinishLater(store.AttemptFinishParams{Run: run, Attempt: 1, Started: time.Now()}, func(fin *store.AttemptFinishResult, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				t.Errorf("finish %s: %v", run.ID, err)
				return
			}
			statuses[run.ID] = fin.Status
		})
	}
	if err := st.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	var succeeded int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM converge_runs WHERE status = 'succeeded' AND resource LIKE 'later/%'`).Scan(&succeeded); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if succeeded != n || len(statuses) != n {
		t.Errorf("after Drain: %d runs succeeded and %d callbacks ran, want %d of each", succeeded, len(statuses), n)
	}
	for id, s := range statuses {
		if s != converge.RunSucceeded {
			t.Errorf("run %s: %s", id, s)
		}
	}
}

// TestOutcomeRecordedEarlier: when a retried outcome write finds its
// attempt closed already, the outcome it wrote in an earlier try (whose
// answer was lost) is reported as that write's result, not as fenced; an
// attempt closed otherwise (abandoned) stays fenced.
func TestOutcomeRecordedEarlier(t *testing.T) {
	t.Parallel()
	st, pool := newBatchStore(t)
	ctx := t.Context()
	begin := func(resource string) *converge.Run {
		t.Helper()
		res, err := accept(t, st, "build", resource, 1, `{}`)
		if err != nil {
			t.Fatal(err)
		}
		job := runJobID(t, pool, res.Run.ID)
		tk, err := st.Store.AttemptBegin(ctx, res.Run.ID, job, time.Minute)
		if err != nil || tk.Decision != converge.DecisionCall {
			t.Fatalf("begin: %+v, %v", tk, err)
		}
		return tk.Run
	}
	backoff := converge.Backoff{Initial: time.Second, Max: time.Second}
	cases := []struct {
		name    string
		written store.AttemptFinishParams // what the earlier try committed
		retried func(run *converge.Run) store.AttemptFinishParams
		fenced  bool
		outcome converge.AttemptOutcome
		status  converge.RunStatus
	}{
		{"success", store.AttemptFinishParams{}, func(run *converge.Run) store.AttemptFinishParams {
			return store.AttemptFinishParams{Run: run, Attempt: 1}
		}, false, converge.OutcomeSucceeded, converge.RunSucceeded},
		{"transient error", store.AttemptFinishParams{Err: &converge.Error{Class: converge.ClassTransient, Message: "boom"}, Backoff: backoff},
			func(run *converge.Run) store.AttemptFinishParams {
				return store.AttemptFinishParams{Run: run, Attempt: 1, Err: &converge.Error{Class: converge.ClassTransient, Message: "boom"}, Backoff: backoff}
			}, false, converge.OutcomeTransientError, converge.RunRetrying},
		{"abandoned, then a late success", store.AttemptFinishParams{Err: &converge.Error{Class: converge.ClassTransient, Message: "lease lost"}, Abandoned: true, Backoff: backoff},
			func(run *converge.Run) store.AttemptFinishParams {
				return store.AttemptFinishParams{Run: run, Attempt: 1}
			},
			true, "", converge.RunRetrying},
	}
	for i, tc := range cases {
		run := begin(fmt.Sprintf("earlier/%d", i))
		w := tc.written
		w.Run, w.Attempt, w.Started = run, 1, time.Now()
		if _, err := st.Store.AttemptFinish(ctx, w); err != nil {
			t.Fatal(err)
		}
		p := tc.retried(run)
		p.Started = time.Now()
		fin, err := st.gc.AttemptFinish(ctx, p)
		if err != nil || !fin.Fenced {
			t.Fatalf("%s: the second write: %+v, %v; want it fenced", tc.name, fin, err)
		}
		got := st.gc.RecordedEarlier(ctx, p, fin)
		if got.Fenced != tc.fenced || got.Outcome != tc.outcome || got.Status != tc.status {
			t.Errorf("%s: %+v, want fenced %t outcome %q status %s", tc.name, got, tc.fenced, tc.outcome, tc.status)
		}
		if tc.status == converge.RunRetrying && !tc.fenced && (got.RetryIn <= 0 || got.RetryIn > time.Second) {
			t.Errorf("%s: retry in %s, want the recorded backoff", tc.name, got.RetryIn)
		}
	}
}
