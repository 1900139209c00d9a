package invariant

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/converge-run/converge/test/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// fixture is a small history written straight into the tables: stream
// "build app" accepted version 1, whose attempt was in flight when
// version 2 was accepted (so it ended superseded, its attempt cancelled),
// then version 2 succeeded after one transient error.
type fixture struct {
	t0       time.Time
	events   []fxEvent
	runs     []fxRun
	attempts []fxAttempt
	applied  int64
	latest   int64
	calls    []Call
	subs     []Submission
	// after are statements run once the history is written.
	after []string
}

type fxEvent struct {
	id       uuid.UUID
	version  int64
	received time.Duration // after t0
}

type fxRun struct {
	id, event uuid.UUID
	version   int64
	status    string
	attempts  int
	finished  time.Duration // after t0; 0 = unfinished
	hold      []string      // written after the run is finished
}

type fxAttempt struct {
	run      uuid.UUID
	number   int
	outcome  string // "" = open
	started  time.Duration
	finished time.Duration
}

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

func newFixture() *fixture {
	f := &fixture{t0: time.Now().Add(-time.Hour).Truncate(time.Millisecond), applied: 2, latest: 2}
	e1, e2 := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	r1, r2 := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	f.events = []fxEvent{{e1, 1, 0}, {e2, 2, ms(100)}}
	f.runs = []fxRun{
		{r1, e1, 1, "superseded", 1, ms(100), nil},
		{r2, e2, 2, "succeeded", 2, ms(400), nil},
	}
	f.attempts = []fxAttempt{
		{r1, 1, "cancelled", ms(10), ms(160)},
		{r2, 1, "transient_error", ms(170), ms(230)},
		{r2, 2, "succeeded", ms(300), ms(390)},
	}
	f.calls = []Call{
		{Kind: "build", Resource: "app", Version: 1, RunID: r1, Attempt: 1, Start: f.at(ms(20)), End: f.at(ms(150)), Outcome: CallCancelled},
		{Kind: "build", Resource: "app", Version: 2, RunID: r2, Attempt: 1, Start: f.at(ms(180)), End: f.at(ms(220)), Outcome: CallTransient, Status: 503},
		{Kind: "build", Resource: "app", Version: 2, RunID: r2, Attempt: 2, Start: f.at(ms(310)), End: f.at(ms(380)), Outcome: CallSucceeded, Status: 200},
	}
	f.subs = []Submission{
		{Kind: "build", Resource: "app", Version: 1, Payload: `{}`, Status: 202, EventID: e1, SupersededRuns: []uuid.UUID{}},
		{Kind: "build", Resource: "app", Version: 2, Payload: `{}`, Status: 202, EventID: e2, SupersededRuns: []uuid.UUID{r1}},
		{Kind: "build", Resource: "app", Version: 1, Payload: `{}`, Status: 200, EventID: e1},
		{Kind: "build", Resource: "app", Version: 1, Payload: `{"x":1}`, Status: 409, Problem: "stale-version"},
	}
	return f
}

func (f *fixture) at(d time.Duration) time.Time { return f.t0.Add(d) }

func (f *fixture) write(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	ctx := t.Context()
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := pool.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	exec(`INSERT INTO converge_streams (kind, resource, latest_version, applied_version) VALUES ('build', 'app', $1, $2)`, f.latest, f.applied)
	for _, e := range f.events {
		exec(`INSERT INTO converge_events (id, kind, resource, version, payload, received_at) VALUES ($1, 'build', 'app', $2, '{}', $3)`,
			e.id, e.version, f.at(e.received))
	}
	for _, r := range f.runs {
		// A run is written unfinished with its attempts, then finished, as
		// converge does (the one-shot trigger and the one-unfinished-run
		// index allow nothing else).
		exec(`INSERT INTO converge_runs (id, event_id, number, kind, resource, version, status, attempts, max_attempts, created_at)
			VALUES ($1, $2, 1, 'build', 'app', $3, 'running', $4, 5, $5)`, r.id, r.event, r.version, r.attempts, f.t0)
		for _, a := range f.attempts {
			if a.run != r.id {
				continue
			}
			var outcome, finished any
			if a.outcome != "" {
				outcome, finished = a.outcome, f.at(a.finished)
			}
			exec(`INSERT INTO converge_attempts (run_id, number, outcome, started_at, finished_at) VALUES ($1, $2, $3, $4, $5)`,
				a.run, a.number, outcome, f.at(a.started), finished)
		}
		if r.finished > 0 {
			exec(`UPDATE converge_runs SET status = $2, finished_at = $3 WHERE id = $1`, r.id, r.status, f.at(r.finished))
		} else {
			exec(`UPDATE converge_runs SET status = $2 WHERE id = $1`, r.id, r.status)
		}
		if r.hold != nil {
			exec(`UPDATE converge_runs SET hold = $2 WHERE id = $1`, r.id, r.hold)
		}
	}
	for _, sql := range f.after {
		exec(sql)
	}
}

// TestCheck shows that each rule holds on a correct history and is caught
// when the history is broken.
func TestCheck(t *testing.T) {
	pool := pgtest.Pool(t)
	tests := []struct {
		name   string
		mutate func(f *fixture)
		rules  []string // the rules that must be reported; nil = none
		late   int      // LateObservations
	}{
		{name: "correct history"},
		{name: "calls overlap", rules: []string{"G3"}, mutate: func(f *fixture) {
			f.calls[1].Start = f.at(ms(140)) // before version 1's call ended
		}},
		{name: "withdrawn call noticed late", late: 1, mutate: func(f *fixture) {
			// The target noticed the closed connection after the next call
			// began, but converge had finished the attempt (160ms) before.
			f.calls[0].End = f.at(ms(185))
		}},
		{name: "withdrawn call handled late", late: 1, mutate: func(f *fixture) {
			// The target even entered the handler after converge had let
			// the call go and the next call had begun.
			f.calls[0].Start, f.calls[0].End = f.at(ms(182)), f.at(ms(186))
		}},
		{name: "call still open at converge", rules: []string{"G3"}, late: 0, mutate: func(f *fixture) {
			f.calls[0].End = f.at(ms(185))
			f.attempts[0].finished = ms(200) // converge let go of it after the next call began
		}},
		{name: "new then old", rules: []string{"G2", "G4"}, mutate: func(f *fixture) {
			f.calls[0].Start, f.calls[0].End = f.at(ms(240)), f.at(ms(250))
			f.attempts[0].started, f.attempts[0].finished = ms(235), ms(255)
		}},
		{name: "superseded attempt recorded as a success", rules: []string{"G4"}, mutate: func(f *fixture) {
			f.attempts[0].outcome = "succeeded"
			f.calls[0].Outcome, f.calls[0].Status = CallSucceeded, 200
		}},
		{name: "superseded run not listed", rules: []string{"G4"}, mutate: func(f *fixture) {
			f.subs[1].SupersededRuns = nil
		}},
		{name: "stale answer for an equal replay", rules: []string{"G5"}, mutate: func(f *fixture) {
			f.subs[2].Status, f.subs[2].Problem = 409, "stale-version"
		}},
		{name: "accepted twice", rules: []string{"G5"}, mutate: func(f *fixture) {
			f.subs = append(f.subs, f.subs[0])
		}},
		{name: "open attempt", rules: []string{"G4", "G6"}, mutate: func(f *fixture) {
			f.attempts[0].outcome = ""
		}},
		{name: "attempt count", rules: []string{"G6"}, mutate: func(f *fixture) {
			f.runs[1].attempts = 3
		}},
		{name: "run unfinished", rules: []string{"G8", "terminal"}, mutate: func(f *fixture) {
			f.runs[1].status, f.runs[1].finished = "retrying", 0
			f.attempts[2].outcome = "transient_error"
			f.calls[2].Outcome, f.calls[2].Status = CallTransient, 503
		}},
		{name: "applied version behind", rules: []string{"G8"}, mutate: func(f *fixture) {
			f.applied = 1
		}},
		{name: "call without attempt", rules: []string{"calls"}, mutate: func(f *fixture) {
			f.calls = append(f.calls, Call{Kind: "build", Resource: "app", Version: 2, RunID: f.runs[1].id, Attempt: 3,
				Start: f.at(ms(395)), End: f.at(ms(398)), Outcome: CallSucceeded})
		}},
		{name: "held run with attempts", rules: []string{"held"}, mutate: func(f *fixture) {
			f.runs[0].hold = []string{"approval"} // superseded while held, yet it had attempts
		}},
		{name: "held run whose target was called", rules: []string{"calls", "held"}, mutate: func(f *fixture) {
			// Superseded while held, no attempt recorded, yet the target
			// saw a call of it (before version 2 was accepted).
			f.runs[0].hold, f.runs[0].attempts = []string{"approval"}, 0
			f.attempts = f.attempts[1:]
			f.calls[0].End = f.at(ms(90))
		}},
		{name: "run counts off by one", rules: []string{"counts"}, mutate: func(f *fixture) {
			f.after = []string{`UPDATE converge_run_counts SET n = n + 1 WHERE ctid IN (
				SELECT ctid FROM converge_run_counts WHERE kind = 'build' AND status = 'succeeded' LIMIT 1)`}
		}},
		{name: "run counts of a status without runs", rules: []string{"counts"}, mutate: func(f *fixture) {
			f.after = []string{`INSERT INTO converge_run_counts (kind, status, n) VALUES ('deploy', 'failed', 2)`}
		}},
		{name: "run counts in deltas", mutate: func(f *fixture) {
			// Split into rows of deltas: the sums are what count.
			f.after = []string{`INSERT INTO converge_run_counts (kind, status, n)
				VALUES ('build', 'succeeded', 5), ('build', 'succeeded', -5), ('deploy', 'failed', 1), ('deploy', 'failed', -1)`}
		}},
		{name: "success the target did not answer", rules: []string{"calls"}, mutate: func(f *fixture) {
			f.calls[2].Outcome, f.calls[2].Status = CallTransient, 503
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture()
			if tt.mutate != nil {
				tt.mutate(f)
			}
			// The cases share the package database, emptied before each.
			// TRUNCATE fires no row triggers, so runs can go.
			if _, err := pool.Exec(t.Context(), `TRUNCATE converge_dead_letters, converge_attempts, converge_runs,
				converge_events, converge_streams, converge_workflow_steps, converge_workflow_runs`); err != nil {
				t.Fatal(err)
			}
			f.write(t, pool)
			rep, err := Check(t.Context(), pool, Params{Calls: f.calls, Submissions: f.subs})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, v := range rep.Violations {
				if !slices.Contains(got, v.Rule) {
					got = append(got, v.Rule)
				}
			}
			slices.Sort(got)
			if strings.Join(got, ",") != strings.Join(tt.rules, ",") {
				t.Errorf("rules broken: %v, want %v; violations:\n%s", got, tt.rules, violations(rep))
			}
			if rep.LateObservations != tt.late {
				t.Errorf("late observations: %d, want %d", rep.LateObservations, tt.late)
			}
			if tt.mutate == nil && (rep.Events != 2 || rep.Calls != 3 || rep.Supersessions != 1 || rep.CancelledAttempts != 1) {
				t.Errorf("report: %s", rep.Summary())
			}
		})
	}
}

func violations(r *Report) string {
	var b strings.Builder
	for _, v := range r.Violations {
		b.WriteString("  " + v.String() + "\n")
	}
	return b.String()
}
