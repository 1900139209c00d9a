package store_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/store"
	"github.com/converge-run/converge/test/pgtest"
)

// diffPath runs the hot transactions either one call per transaction
// (EventAccept, AttemptBegin, AttemptFinish) or all the calls of a step in
// one (EventAcceptMany, AttemptBeginMany, AttemptFinishMany), on a database
// of its own.
type diffPath struct {
	many bool
	// debounce is the kind's debounce of the events accepted (0: off).
	debounce time.Duration
	st       *store.Store
	pool     *pgxpool.Pool
	// runs are the runs accepted so far by (resource, version).
	runs map[string]*converge.Run
	// answers are the answers of every call, in a form that does not
	// depend on ids or times, in order.
	answers []string
}

func newDiffPath(t *testing.T, many bool) *diffPath {
	t.Helper()
	pool := pgtest.OpenPool(t, pgtest.NewDatabase(t), 4)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		t.Fatalf("river client: %v", err)
	}
	return &diffPath{many: many, st: store.New(pool, client), pool: pool, runs: map[string]*converge.Run{}}
}

func (d *diffPath) say(format string, args ...any) {
	d.answers = append(d.answers, fmt.Sprintf(format, args...))
}

func errAnswer(err error) string {
	if err == nil {
		return "ok"
	}
	var ae *converge.AppError
	if errors.As(err, &ae) {
		return "error " + ae.Code
	}
	return "error " + err.Error()
}

type diffAccept struct {
	resource string
	version  int64
	payload  string
}

// accept accepts the events of one step.
func (d *diffPath) accept(t *testing.T, evs ...diffAccept) {
	t.Helper()
	ctx := t.Context()
	ps := make([]store.EventAcceptParams, len(evs))
	for i, e := range evs {
		ps[i] = store.EventAcceptParams{
			EventSubmission: converge.EventSubmission{Kind: "deploy", Resource: e.resource, Version: e.version, Payload: json.RawMessage(e.payload)},
			MaxAttempts:     2, Debounce: d.debounce,
		}
	}
	res := make([]*converge.EventAcceptResult, len(ps))
	errs := make([]error, len(ps))
	if d.many && len(ps) > 1 {
		var err error
		res, errs, err = d.st.EventAcceptMany(ctx, ps)
		if err != nil {
			t.Fatalf("accept many: %v", err)
		}
	} else {
		for i, p := range ps {
			res[i], errs[i] = d.st.EventAccept(ctx, p)
		}
	}
	for i, e := range evs {
		if errs[i] != nil {
			d.say("accept %s@%d: %s", e.resource, e.version, errAnswer(errs[i]))
			continue
		}
		r := res[i]
		var sup []string
		for _, id := range r.SupersededRuns {
			for k, run := range d.runs {
				if run.ID == id {
					sup = append(sup, k)
				}
			}
		}
		slices.Sort(sup)
		d.say("accept %s@%d: replay %v, event %s@%d %s, run %d %s attempts %d/%d, superseded %v", e.resource, e.version, r.Replay,
			r.Event.Resource, r.Event.Version, r.Event.Status, r.Run.Number, r.Run.Status, r.Run.Attempts, r.Run.MaxAttempts, sup)
		if !r.Replay {
			d.runs[fmt.Sprintf("%s@%d", e.resource, e.version)] = r.Run
		}
	}
}

// begin begins attempts of the runs of one step, named resource@version.
func (d *diffPath) begin(t *testing.T, names ...string) {
	t.Helper()
	ctx := t.Context()
	ps := make([]store.AttemptBeginParams, len(names))
	for i, name := range names {
		run := d.runs[name]
		var job int64
		if err := d.pool.QueryRow(ctx, `SELECT job_id FROM converge_runs WHERE id = $1`, run.ID).Scan(&job); err != nil {
			t.Fatal(err)
		}
		ps[i] = store.AttemptBeginParams{RunID: run.ID, JobID: job, LeaseTTL: time.Minute}
	}
	tickets := make([]*converge.AttemptTicket, len(ps))
	if d.many && len(ps) > 1 {
		var err error
		tickets, err = d.st.AttemptBeginMany(ctx, ps)
		if err != nil {
			t.Fatalf("begin many: %v", err)
		}
	}
	for i, p := range ps {
		if tickets[i] == nil {
			var err error
			if tickets[i], err = d.st.AttemptBegin(ctx, p.RunID, p.JobID, p.LeaseTTL); err != nil {
				t.Fatalf("begin %s: %v", names[i], err)
			}
		}
		tk := tickets[i]
		status := ""
		if tk.Run != nil {
			d.runs[names[i]] = tk.Run
			status = string(tk.Run.Status)
		}
		d.say("begin %s: decision %d, attempt %d, run %s, waits %v, payload %s, lease from set %v", names[i], tk.Decision, tk.Attempt, status,
			tk.Wait > 0, tk.Payload, !tk.LeaseFrom.IsZero())
	}
}

type diffFinish struct {
	name string
	p    store.AttemptFinishParams
}

// finish finishes attempts of one step.
func (d *diffPath) finish(t *testing.T, fs ...diffFinish) {
	t.Helper()
	ctx := t.Context()
	ps := make([]store.AttemptFinishParams, len(fs))
	for i, f := range fs {
		ps[i] = f.p
		ps[i].Run = d.runs[f.name]
		ps[i].Started = time.Now()
	}
	res := make([]*store.AttemptFinishResult, len(ps))
	if d.many && len(ps) > 1 {
		var err error
		res, err = d.st.AttemptFinishMany(ctx, ps)
		if err != nil {
			t.Fatalf("finish many: %v", err)
		}
	} else {
		for i, p := range ps {
			var err error
			if res[i], err = d.st.AttemptFinish(ctx, p); err != nil {
				t.Fatalf("finish %s: %v", fs[i].name, err)
			}
		}
	}
	for i, f := range fs {
		d.say("finish %s attempt %d: %s, retry in %s, requeue %v", f.name, f.p.Attempt, res[i].Status, res[i].RetryIn, res[i].Requeue)
	}
}

// rows returns the database's rows of every table the hot transactions
// write, without ids and times (only whether a time is set).
func (d *diffPath) rows(t *testing.T) []string {
	t.Helper()
	queries := map[string]string{
		"events": `SELECT kind, resource, version, payload::text FROM converge_events ORDER BY 1, 2, 3`,
		"runs": `SELECT kind, resource, version, number, status, attempts, max_attempts,
				next_attempt_at IS NOT NULL, next_attempt_at > now() + interval '15 seconds', started_at IS NOT NULL,
				finished_at IS NOT NULL, error::text, output::text
			FROM converge_runs ORDER BY 1, 2, 3, 4`,
		"attempts": `SELECT r.kind, r.resource, r.version, a.number, a.outcome, a.finished_at IS NOT NULL, a.duration_ms IS NOT NULL,
				a.duration_ms >= 0, a.error::text
			FROM converge_attempts a JOIN converge_runs r ON r.id = a.run_id ORDER BY 1, 2, 3, 4`,
		"streams": `SELECT s.kind, s.resource, s.latest_version, s.latest_at IS NOT NULL, s.burst_since IS NOT NULL, s.applied_version, s.applied_at IS NOT NULL,
				(SELECT r.version FROM converge_runs r WHERE r.id = s.lease_run_id), s.lease_attempt, s.lease_expires_at > now()
			FROM converge_streams s ORDER BY 1, 2`,
		"dead_letters": `SELECT kind, resource, version, status, superseded_by_version, resolved_at IS NOT NULL, resolved_by, error::text
			FROM converge_dead_letters ORDER BY 1, 2, 3`,
		"river_job": `SELECT r.kind, r.resource, r.version, r.number, j.kind, j.queue, j.state, j.max_attempts, j.scheduled_at > now() + interval '1 second'
			FROM river_job j JOIN converge_runs r ON r.job_id = j.id ORDER BY 1, 2, 3, 4`,
	}
	var out []string
	for _, table := range []string{"events", "runs", "attempts", "streams", "dead_letters", "river_job"} {
		rows, err := d.pool.Query(t.Context(), queries[table])
		if err != nil {
			t.Fatalf("%s: %v", table, err)
		}
		got, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (string, error) {
			vals, err := row.Values()
			if err != nil {
				return "", err
			}
			parts := make([]string, len(vals))
			for i, v := range vals {
				switch v := v.(type) {
				case nil:
					parts[i] = "NULL"
				case *int64:
					parts[i] = fmt.Sprint(*v)
				default:
					parts[i] = fmt.Sprint(v)
				}
			}
			return table + ": " + strings.Join(parts, " | "), nil
		})
		if err != nil {
			t.Fatalf("%s: %v", table, err)
		}
		out = append(out, got...)
	}
	return out
}

// TestAcceptBeginFinishDifferential runs the same scenarios through the
// one-call paths and the set-based paths of the hot transactions and
// compares every answer and every resulting row: fresh versions, replays,
// conflicts, stale versions, supersession (of a queued and of a running
// run, whose late result is then recorded cancelled), a lease held, a
// success, a retry, a permanent failure (its dead letter), an abandoned
// attempt after the fence stopped the call, one taken back after a
// shutdown, and an attempt whose second try fails for good.
func TestAcceptBeginFinishDifferential(t *testing.T) {
	t.Parallel()
	transient := &converge.Error{Class: converge.ClassTransient, Message: "503 Service Unavailable"}
	permanent := &converge.Error{Class: converge.ClassPermanent, Message: "422 Unprocessable Entity"}
	fenced := &converge.Error{Class: converge.ClassTransient, Message: "the stream's lease could not be renewed in time"}
	backoff := converge.Backoff{Initial: 10 * time.Second, Max: 10 * time.Second}
	scenario := func(d *diffPath) {
		// Fresh versions on every stream.
		var fresh []diffAccept
		for _, r := range []string{"success", "replay", "conflict", "stale", "supersede", "retry", "permanent", "fenced", "interrupted", "late"} {
			fresh = append(fresh, diffAccept{r, 1, `{"v": 1}`})
		}
		d.accept(t, fresh...)
		// A replay (equal as JSON), a conflict, newer versions superseding
		// a queued run.
		d.accept(t,
			diffAccept{"replay", 1, `{"v":1}`},
			diffAccept{"conflict", 1, `{"v": 2}`},
			diffAccept{"stale", 3, `{"v": 3}`},
			diffAccept{"supersede", 2, `{"v": 2}`},
			diffAccept{"new", 1, `{}`},
		)
		// A stale version, a replay of a superseded version. (A step holds
		// one call per stream, as a batch does.)
		d.accept(t, diffAccept{"stale", 2, `{"v": 2}`}, diffAccept{"supersede", 1, `{"v": 1}`})

		// Attempts begin; a superseded run's job does nothing.
		d.begin(t, "success@1", "retry@1", "permanent@1", "fenced@1", "interrupted@1", "late@1", "supersede@1", "stale@3")
		// Leases held: wait.
		d.begin(t, "success@1", "retry@1")
		// The running run of stream late is superseded.
		d.accept(t, diffAccept{"late", 2, `{"v": 2}`}, diffAccept{"success", 1, `{"v": 1}`}, diffAccept{"stale", 1, `{"v": 1}`})

		d.finish(t,
			diffFinish{"success@1", store.AttemptFinishParams{Attempt: 1, Output: json.RawMessage(`{"image":"x"}`)}},
			diffFinish{"stale@3", store.AttemptFinishParams{Attempt: 1}},
			diffFinish{"retry@1", store.AttemptFinishParams{Attempt: 1, Err: transient, RetryAfter: 20 * time.Second, Backoff: backoff}},
			diffFinish{"permanent@1", store.AttemptFinishParams{Attempt: 1, Err: permanent, Backoff: backoff}},
			diffFinish{"fenced@1", store.AttemptFinishParams{Attempt: 1, Err: fenced, Abandoned: true, RetryAfter: 20 * time.Second, Backoff: backoff}},
			diffFinish{"interrupted@1", store.AttemptFinishParams{Attempt: 1, Err: transient, Interrupted: true, Backoff: backoff}},
			diffFinish{"late@1", store.AttemptFinishParams{Attempt: 1}},
		)
		// A second finish of a recorded attempt changes nothing.
		d.finish(t, diffFinish{"success@1", store.AttemptFinishParams{Attempt: 1}}, diffFinish{"permanent@1", store.AttemptFinishParams{Attempt: 1}})

		// The interrupted attempt again; the fenced run's second (last)
		// attempt fails; a newer success supersedes the dead letter.
		if _, err := d.pool.Exec(t.Context(), `UPDATE converge_runs SET next_attempt_at = NULL WHERE resource IN ('fenced', 'interrupted')`); err != nil {
			t.Fatal(err)
		}
		d.begin(t, "interrupted@1", "fenced@1", "late@2")
		d.finish(t,
			diffFinish{"interrupted@1", store.AttemptFinishParams{Attempt: 1, Output: json.RawMessage(`{}`)}},
			diffFinish{"fenced@1", store.AttemptFinishParams{Attempt: 2, Err: transient, Backoff: backoff}},
			diffFinish{"late@2", store.AttemptFinishParams{Attempt: 1, Err: permanent}},
		)
		d.accept(t, diffAccept{"permanent", 2, `{"v": 2}`}, diffAccept{"fenced", 2, `{"v": 2}`})
		d.begin(t, "permanent@2", "fenced@2")
		d.finish(t,
			diffFinish{"permanent@2", store.AttemptFinishParams{Attempt: 1}},
			diffFinish{"fenced@2", store.AttemptFinishParams{Attempt: 1, Output: json.RawMessage(`[1, 2]`)}},
		)
	}

	one, many := newDiffPath(t, false), newDiffPath(t, true)
	scenario(one)
	scenario(many)

	if len(one.answers) < 40 {
		t.Fatalf("only %d answers: the scenario did not run", len(one.answers))
	}
	for i := range max(len(one.answers), len(many.answers)) {
		a, b := at(one.answers, i), at(many.answers, i)
		if a != b {
			t.Errorf("answer %d differs:\n  one:  %s\n  many: %s", i, a, b)
		}
	}
	rowsOne, rowsMany := one.rows(t), many.rows(t)
	if len(rowsOne) < 50 {
		t.Fatalf("only %d rows: the scenario did not run", len(rowsOne))
	}
	for i := range max(len(rowsOne), len(rowsMany)) {
		a, b := at(rowsOne, i), at(rowsMany, i)
		if a != b {
			t.Errorf("row %d differs:\n  one:  %s\n  many: %s", i, a, b)
		}
	}
	if t.Failed() || testing.Verbose() {
		t.Logf("answers (one call per transaction):\n%s", strings.Join(one.answers, "\n"))
		t.Logf("rows (one call per transaction):\n%s", strings.Join(rowsOne, "\n"))
	}
}

func at(s []string, i int) string {
	if i < len(s) {
		return s[i]
	}
	return "(none)"
}
