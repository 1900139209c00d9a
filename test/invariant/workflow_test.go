package invariant

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/converge-run/converge/test/pgtest"
)

// wfFixture is a two-step workflow run written straight into the tables:
// step build (build app) then step deploy (deploy staging/app), version 1.
type wfFixture struct {
	t0 time.Time
	// status and finished are the workflow run's; deployState the second
	// step's state; deployAt when its event was received (after t0).
	status       string
	finished     bool
	deployState  string
	deployAt     time.Duration
	deployStatus string // its run's status
	buildDone    time.Duration
	extraEvent   bool // an event of the workflow run outside its steps
	applied      int64
	// cancelled ends the workflow run cancelled by an operator (an audit
	// entry), at 400 ms, after build's success accepted deploy.
	cancelled bool
	// redriveAt, when set, adds a second run of deploy's event after the
	// workflow run ended, created at redriveAt, which succeeded.
	redriveAt time.Duration
}

func newWFFixture() *wfFixture {
	return &wfFixture{t0: time.Now().Add(-time.Hour).Truncate(time.Millisecond), status: "succeeded", finished: true,
		deployState: "accepted", deployAt: ms(200), deployStatus: "succeeded", buildDone: ms(100), applied: 1}
}

func (f *wfFixture) write(t *testing.T, exec func(string, ...any)) {
	t.Helper()
	at := func(d time.Duration) time.Time { return f.t0.Add(d) }
	w, e1, e2, r1, r2 := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	exec(`INSERT INTO converge_workflow_runs (id, workflow, resource, version, payload, status, created_at)
		VALUES ($1, 'release', 'app', 1, '{}', 'running', $2)`, w, f.t0)
	exec(`INSERT INTO converge_streams (kind, resource, latest_version, applied_version) VALUES ('build', 'app', 1, 1)`)
	exec(`INSERT INTO converge_events (id, kind, resource, version, payload, received_at, workflow_run_id) VALUES ($1, 'build', 'app', 1, '{}', $2, $3)`, e1, f.t0, w)
	exec(`INSERT INTO converge_runs (id, event_id, number, kind, resource, version, status, max_attempts, workflow_run_id, finished_at)
		VALUES ($1, $2, 1, 'build', 'app', 1, 'succeeded', 5, $3, $4)`, r1, e1, w, at(f.buildDone))
	exec(`INSERT INTO converge_workflow_steps (workflow_run_id, name, position, kind, resource, needs, state, event_id, max_attempts)
		VALUES ($1, 'build', 0, 'build', 'app', '{}', 'accepted', $2, 1)`, w, e1)
	var deployEvent any
	if f.deployState == "accepted" {
		deployEvent = e2
		exec(`INSERT INTO converge_streams (kind, resource, latest_version, applied_version) VALUES ('deploy', 'staging/app', 1, $1)`, f.applied)
		exec(`INSERT INTO converge_events (id, kind, resource, version, payload, received_at, workflow_run_id) VALUES ($1, 'deploy', 'staging/app', 1, '{}', $2, $3)`, e2, at(f.deployAt), w)
		var fin any
		if f.deployStatus != "queued" {
			fin = at(f.deployAt + ms(50))
		}
		exec(`INSERT INTO converge_runs (id, event_id, number, kind, resource, version, status, max_attempts, workflow_run_id, finished_at)
			VALUES ($1, $2, 1, 'deploy', 'staging/app', 1, $3, 5, $4, $5)`, r2, e2, f.deployStatus, w, fin)
	}
	exec(`INSERT INTO converge_workflow_steps (workflow_run_id, name, position, kind, resource, needs, state, event_id, max_attempts)
		VALUES ($1, 'deploy', 1, 'deploy', 'staging/app', '{build}', $2, $3, 1)`, w, f.deployState, deployEvent)
	if f.extraEvent {
		exec(`INSERT INTO converge_streams (kind, resource, latest_version) VALUES ('deploy', 'other', 1)`)
		exec(`INSERT INTO converge_events (id, kind, resource, version, payload, workflow_run_id) VALUES ($1, 'deploy', 'other', 1, '{}', $2)`, uuid.Must(uuid.NewV7()), w)
	}
	if f.cancelled {
		exec(`INSERT INTO converge_audit (id, actor, role, action, targets) VALUES ($1, 'ops', 'operator', 'workflow_run.cancel', $2)`,
			uuid.Must(uuid.NewV7()), []string{w.String()})
	}
	if f.finished {
		exec(`UPDATE converge_workflow_runs SET status = $2, finished_at = $3 WHERE id = $1`, w, f.status, at(ms(400)))
	} else {
		exec(`UPDATE converge_workflow_runs SET status = $2 WHERE id = $1`, w, f.status)
	}
	if f.redriveAt != 0 {
		exec(`INSERT INTO converge_runs (id, event_id, number, kind, resource, version, status, max_attempts, workflow_run_id, created_at, finished_at)
			VALUES ($1, $2, 2, 'deploy', 'staging/app', 1, 'succeeded', 5, $3, $4, $5)`, uuid.Must(uuid.NewV7()), e2, w, at(f.redriveAt), at(f.redriveAt+ms(50)))
	}
}

// TestCheckWorkflows shows that each workflow rule holds on a correct
// history and is caught when the history is broken.
func TestCheckWorkflows(t *testing.T) {
	pool := pgtest.Pool(t)
	for _, tc := range []struct {
		name     string
		mutate   func(*wfFixture)
		converge bool
		want     string // in a W violation; "" = none
	}{
		{"correct", nil, true, ""},
		{"accepted before its need succeeded", func(f *wfFixture) { f.deployAt = ms(50) }, false, "before its need build succeeded"},
		{"dependent never accepted", func(f *wfFixture) { f.deployState, f.status, f.finished = "pending", "running", false }, false, "although its needs all succeeded"},
		{"succeeded with a failed step", func(f *wfFixture) { f.deployStatus = "failed" }, false, "succeeded but its steps"},
		{"final with a pending step", func(f *wfFixture) { f.deployState, f.status = "pending", "failed" }, false, "pending steps"},
		{"event outside the steps", func(f *wfFixture) { f.extraEvent = true }, false, "to none of its steps"},
		{"last stage behind", func(f *wfFixture) { f.applied = 0 }, true, "last stage deploy"},
		{"cancelled, its step done first", func(f *wfFixture) {
			f.status, f.cancelled, f.deployAt = "cancelled", true, ms(300)
		}, false, ""},
		// The cancel missed the step that build's success had just
		// accepted, which then ran and succeeded after it.
		{"cancelled, its step done after", func(f *wfFixture) {
			f.status, f.cancelled, f.deployAt = "cancelled", true, ms(380)
		}, false, "after the workflow run was cancelled"},
		// A final workflow run shows the step runs it had when it ended: a
		// redrive of its failed step's dead letter afterwards is the
		// event's, not the workflow run's.
		{"failed, its step redriven after the end", func(f *wfFixture) {
			f.status, f.deployStatus, f.redriveAt = "failed", "failed", ms(500)
		}, false, ""},
		{"failed, a run of its step before the end not shown", func(f *wfFixture) {
			f.status, f.deployStatus, f.redriveAt = "failed", "failed", ms(350)
		}, false, "before the workflow run ended"},
		{"running, its step queued", func(f *wfFixture) {
			f.status, f.finished, f.deployStatus, f.applied = "running", false, "queued", 0
		}, false, ""},
		// Its step failed and nothing is left to run: failed, not
		// running (a sibling's redrive had set it running).
		{"running with nothing left to run", func(f *wfFixture) {
			f.status, f.finished, f.deployStatus, f.applied = "running", false, "failed", 0
		}, false, "no step queued, running, retrying or held"},
		{"cancelled, its step still queued", func(f *wfFixture) {
			f.status, f.cancelled, f.deployStatus, f.applied = "cancelled", true, "queued", 0
		}, false, "after the workflow run was cancelled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := pool.Exec(t.Context(), `TRUNCATE converge_dead_letters, converge_attempts, converge_runs,
				converge_events, converge_streams, converge_workflow_steps, converge_workflow_runs, converge_audit`); err != nil {
				t.Fatal(err)
			}
			f := newWFFixture()
			if tc.mutate != nil {
				tc.mutate(f)
			}
			f.write(t, func(sql string, args ...any) {
				t.Helper()
				if _, err := pool.Exec(t.Context(), sql, args...); err != nil {
					t.Fatalf("%s: %v", sql, err)
				}
			})
			rep, err := Check(t.Context(), pool, Params{WorkflowsConverge: tc.converge, AllowUnconverged: true})
			if err != nil {
				t.Fatal(err)
			}
			var w []string
			for _, v := range rep.Violations {
				if v.Rule == "W" {
					w = append(w, v.String())
				}
			}
			got := strings.Join(w, "\n")
			switch {
			case tc.want == "" && got != "":
				t.Fatalf("violations on a correct history:\n%s", got)
			case tc.want != "" && !strings.Contains(got, tc.want):
				t.Fatalf("want a W violation with %q, got:\n%s", tc.want, got)
			}
			if rep.WorkflowRuns != 1 {
				t.Fatalf("WorkflowRuns = %d, want 1", rep.WorkflowRuns)
			}
		})
	}
}
