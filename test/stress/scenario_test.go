package stress

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/converge-run/converge/test/cvproc"
	"github.com/converge-run/converge/test/invariant"
	"github.com/converge-run/converge/test/testkit"
)

// runView is the part of a run the scenario tests read.
type runView struct {
	ID             uuid.UUID `json:"id"`
	Status         string    `json:"status"`
	Attempts       int       `json:"attempts"`
	FinishedAt     *string   `json:"finished_at"`
	AttemptHistory []struct {
		Number  int    `json:"number"`
		Outcome string `json:"outcome"`
	} `json:"attempt_history"`
}

func (r runView) outcomes() []string {
	var out []string
	for _, a := range r.AttemptHistory {
		out = append(out, a.Outcome)
	}
	return out
}

// eventRun returns the latest run of an event, with its attempts.
func (c *cluster) eventRun(ctx context.Context, eventID uuid.UUID) runView {
	c.t.Helper()
	var ev struct {
		Runs []runView `json:"runs"`
	}
	status, pr, err := c.do(ctx, http.MethodGet, "/v1/events/"+eventID.String(), nil, &ev)
	if err != nil || status != http.StatusOK || len(ev.Runs) == 0 {
		c.t.Fatalf("GET event %s: %d %s %v (%d runs)", eventID, status, pr.Type, err, len(ev.Runs))
	}
	return ev.Runs[len(ev.Runs)-1]
}

// waitRun polls the event's latest run until cond holds.
func (c *cluster) waitRun(ctx context.Context, eventID uuid.UUID, what string, cond func(runView) bool) runView {
	c.t.Helper()
	var r runView
	testkit.WaitFor(c.t, 30*time.Second, what, func() bool {
		r = c.eventRun(ctx, eventID)
		return cond(r)
	})
	return r
}

// mustSubmit submits an event and wants a 202.
func (c *cluster) mustSubmit(ctx context.Context, kind, resource string, version int64) (invariant.Submission, acceptAnswer) {
	c.t.Helper()
	s, ans, err := c.submit(ctx, kind, resource, version, map[string]any{"n": version})
	if err != nil || s.Status != http.StatusAccepted {
		c.t.Fatalf("submit %s %s@%d: %d %s %v", kind, resource, version, s.Status, s.Problem, err)
	}
	return s, ans
}

// waitCall waits until the target has a call of run in flight.
func (c *cluster) waitCall(run uuid.UUID) invariant.Call {
	c.t.Helper()
	var call invariant.Call
	testkit.WaitFor(c.t, 30*time.Second, "a call of run "+run.String()+" in flight", func() bool {
		for _, cl := range c.target.InFlight() {
			if cl.RunID == run {
				call = cl
				return true
			}
		}
		return false
	})
	return call
}

// holdTarget answers 200, except that calls of resources starting with
// "hold/" block until their client goes away or release is called, and
// calls of resources starting with "flaky/" answer 503.
type holdTarget struct {
	mu      sync.Mutex
	release chan struct{}
}

func newHoldTarget() *holdTarget { return &holdTarget{release: make(chan struct{})} }

func (h *holdTarget) respond(ctx context.Context, c invariant.Call) int {
	switch {
	case strings.HasPrefix(c.Resource, "hold/"):
		h.mu.Lock()
		ch := h.release
		h.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-ch:
		}
		return http.StatusOK
	case strings.HasPrefix(c.Resource, "flaky/"):
		return http.StatusServiceUnavailable
	}
	return http.StatusOK
}

// Release lets every held call answer.
func (h *holdTarget) Release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	close(h.release)
	h.release = make(chan struct{})
}

// TestRunCancel: an operator cancels a queued, a retrying and a running
// run (200, cancelled; the running call is cancelled at the target and its
// attempt recorded cancelled); a finished run answers 409 run-finished.
func TestRunCancel(t *testing.T) {
	hold := newHoldTarget()
	tgt := invariant.NewTarget(invariant.TargetConfig{Respond: hold.respond})
	c := newCluster(t, tgt, clusterConfig{
		Kinds: []kindConfig{
			{Name: "build", MaxAttempts: 5, Initial: 20 * time.Millisecond, Max: 100 * time.Millisecond, Concurrency: 4, Timeout: 30 * time.Second},
			// slow retries: a run stays retrying for a minute after its
			// first failure.
			{Name: "slow", MaxAttempts: 5, Initial: time.Minute, Max: time.Minute, Concurrency: 4, Timeout: 30 * time.Second},
		},
		RescueAfter: 2 * time.Second,
	})
	ctx := t.Context()
	c.start("api", "api")
	var subs []invariant.Submission
	cancel := func(run uuid.UUID) (int, problem, runView) {
		t.Helper()
		var rv runView
		status, pr, err := c.do(ctx, http.MethodPost, "/v1/runs/"+run.String()+"/cancel", map[string]any{"reason": "test"}, &rv)
		if err != nil {
			t.Fatalf("cancel %s: %v", run, err)
		}
		return status, pr, rv
	}

	// Queued: no worker runs yet.
	s, queued := c.mustSubmit(ctx, "build", "app/queued", 1)
	subs = append(subs, s)
	if queued.Run.Status != "queued" {
		t.Fatalf("new run is %s, want queued", queued.Run.Status)
	}
	status, pr, rv := cancel(queued.Run.ID)
	if status != http.StatusOK || rv.Status != "cancelled" || rv.FinishedAt == nil || rv.Attempts != 0 {
		t.Errorf("cancel queued run: %d %s, run %+v; want 200 cancelled with finished_at and no attempt", status, pr.Type, rv)
	}
	c.start("worker", "w1")

	// Retrying: the first call fails, the next is a minute away.
	s, retrying := c.mustSubmit(ctx, "slow", "flaky/app", 1)
	subs = append(subs, s)
	c.waitRun(ctx, retrying.Event.ID, "run retrying", func(r runView) bool { return r.Status == "retrying" })
	status, pr, rv = cancel(retrying.Run.ID)
	if status != http.StatusOK || rv.Status != "cancelled" || rv.Attempts != 1 || strings.Join(rv.outcomes(), ",") != "transient_error" {
		t.Errorf("cancel retrying run: %d %s, run %+v; want 200 cancelled after one transient_error", status, pr.Type, rv)
	}

	// Running: the call is held until its client goes away.
	s, running := c.mustSubmit(ctx, "build", "hold/app", 1)
	subs = append(subs, s)
	call := c.waitCall(running.Run.ID)
	status, pr, rv = cancel(running.Run.ID)
	if status != http.StatusOK || rv.Status != "cancelled" {
		t.Errorf("cancel running run: %d %s, run %+v; want 200 cancelled", status, pr.Type, rv)
	}
	testkit.WaitFor(t, 30*time.Second, "the held call to end", func() bool { return len(tgt.InFlight()) == 0 })
	var ended invariant.Call
	for _, cl := range tgt.Calls() {
		if cl.RunID == running.Run.ID {
			ended = cl
		}
	}
	if ended.Outcome != invariant.CallCancelled {
		t.Errorf("the target saw the running call end %q, want cancelled: %s", ended.Outcome, ended)
	}
	rv = c.waitRun(ctx, running.Event.ID, "the attempt recorded", func(r runView) bool {
		return len(r.AttemptHistory) == 1 && r.AttemptHistory[0].Outcome != ""
	})
	if rv.Status != "cancelled" || strings.Join(rv.outcomes(), ",") != "cancelled" {
		t.Errorf("cancelled running run: %+v; want cancelled with one cancelled attempt", rv)
	}
	t.Logf("running call of %s cancelled %s after it started", call.Stream(), ended.End.Sub(call.Start).Round(time.Millisecond))

	// Finished runs: cancelled, and succeeded.
	for _, run := range []uuid.UUID{running.Run.ID, queued.Run.ID} {
		if status, pr, _ := cancel(run); status != http.StatusConflict || pr.slug() != "run-finished" {
			t.Errorf("cancel a cancelled run: %d %s, want 409 run-finished", status, pr.Type)
		}
	}
	s, done := c.mustSubmit(ctx, "build", "app/done", 1)
	subs = append(subs, s)
	c.waitRun(ctx, done.Event.ID, "run succeeded", func(r runView) bool { return r.Status == "succeeded" })
	if status, pr, _ := cancel(done.Run.ID); status != http.StatusConflict || pr.slug() != "run-finished" {
		t.Errorf("cancel a succeeded run: %d %s, want 409 run-finished", status, pr.Type)
	}
	if status, pr, _ := cancel(uuid.Must(uuid.NewV7())); status != http.StatusNotFound {
		t.Errorf("cancel an unknown run: %d %s, want 404", status, pr.Type)
	}

	// A cancelled stream takes a newer version as usual.
	s, next := c.mustSubmit(ctx, "build", "app/queued", 2)
	subs = append(subs, s)
	c.waitRun(ctx, next.Event.ID, "run succeeded", func(r runView) bool { return r.Status == "succeeded" })

	c.waitSettled(ctx, 30*time.Second, true)
	c.stopAll()
	for _, cl := range tgt.Calls() {
		if cl.RunID == queued.Run.ID || cl.RunID == retrying.Run.ID && cl.Attempt > 1 {
			t.Errorf("a cancelled run was called: %s", cl)
		}
	}
	c.check(ctx, invariant.Params{Submissions: subs, AllowUnconverged: true})
}

// resourceView is GET /v1/resources/{kind}/{resource}.
type resourceView struct {
	Kind           string   `json:"kind"`
	Resource       string   `json:"resource"`
	LatestVersion  int64    `json:"latest_version"`
	AppliedVersion *int64   `json:"applied_version"`
	AppliedAt      *string  `json:"applied_at"`
	ActiveRun      *runView `json:"active_run"`
}

// TestResourceView: 404 for an unknown stream, keys with '/', and
// active_run while a run is unfinished.
func TestResourceView(t *testing.T) {
	hold := newHoldTarget()
	tgt := invariant.NewTarget(invariant.TargetConfig{Respond: hold.respond})
	c := newCluster(t, tgt, clusterConfig{
		Kinds: []kindConfig{
			{Name: "build", MaxAttempts: 5, Initial: 20 * time.Millisecond, Max: 100 * time.Millisecond, Concurrency: 4, Timeout: 30 * time.Second},
			{Name: "deploy", MaxAttempts: 5, Initial: 20 * time.Millisecond, Max: 100 * time.Millisecond, Concurrency: 4, Timeout: 30 * time.Second},
		},
		RescueAfter: 2 * time.Second,
	})
	ctx := t.Context()
	c.start("api", "api")
	c.start("worker", "w1")
	get := func(path string) (int, problem, resourceView) {
		t.Helper()
		var v resourceView
		status, pr, err := c.do(ctx, http.MethodGet, "/v1/resources/"+path, nil, &v)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		return status, pr, v
	}
	var subs []invariant.Submission

	for _, path := range []string{"build/nope", "nokind/app", "build/team/app/none", "build/", "build/-bad"} {
		if status, pr, _ := get(path); status != http.StatusNotFound || pr.slug() != "not-found" {
			t.Errorf("GET /v1/resources/%s: %d %s, want 404 not-found", path, status, pr.Type)
		}
	}

	// A key with '/' and the other allowed characters.
	key := "team/app.web_1:x@y-z/prod"
	s, first := c.mustSubmit(ctx, "build", key, 7)
	subs = append(subs, s)
	c.waitRun(ctx, first.Event.ID, "run succeeded", func(r runView) bool { return r.Status == "succeeded" })
	status, pr, v := get("build/" + key)
	if status != http.StatusOK || v.Kind != "build" || v.Resource != key || v.LatestVersion != 7 ||
		v.AppliedVersion == nil || *v.AppliedVersion != 7 || v.AppliedAt == nil || v.ActiveRun != nil {
		t.Errorf("GET build/%s: %d %s %+v; want version 7 applied, no active run", key, status, pr.Type, v)
	}
	// The same key of another kind is another stream.
	if status, _, _ := get("deploy/" + key); status != http.StatusNotFound {
		t.Errorf("GET deploy/%s: %d, want 404", key, status)
	}

	// active_run while a newer version is in flight.
	s, held := c.mustSubmit(ctx, "build", "hold/"+key, 1)
	subs = append(subs, s)
	c.waitRun(ctx, held.Event.ID, "run succeeded", func(r runView) bool {
		if r.Status == "running" {
			hold.Release()
		}
		return r.Status == "succeeded"
	})
	s, inFlight := c.mustSubmit(ctx, "build", "hold/"+key, 2)
	subs = append(subs, s)
	c.waitCall(inFlight.Run.ID)
	status, pr, v = get("build/hold/" + key)
	if status != http.StatusOK || v.LatestVersion != 2 || v.AppliedVersion == nil || *v.AppliedVersion != 1 ||
		v.ActiveRun == nil || v.ActiveRun.ID != inFlight.Run.ID || v.ActiveRun.Status != "running" {
		t.Errorf("GET build/hold/%s while version 2 runs: %d %s %+v; want latest 2, applied 1, active run %s running",
			key, status, pr.Type, v, inFlight.Run.ID)
	}
	hold.Release()
	c.waitRun(ctx, inFlight.Event.ID, "run succeeded", func(r runView) bool { return r.Status == "succeeded" })
	if _, _, v = get("build/hold/" + key); v.AppliedVersion == nil || *v.AppliedVersion != 2 || v.ActiveRun != nil {
		t.Errorf("GET build/hold/%s after version 2: %+v; want applied 2, no active run", key, v)
	}

	c.waitSettled(ctx, 30*time.Second, false)
	c.stopAll()
	c.check(ctx, invariant.Params{Submissions: subs})
}

// TestWorkerKilledMidAttempt: a worker killed with SIGKILL while its call
// is in flight; another worker picks the run up once the lease has run
// out (rescue_after), the lost attempt is recorded abandoned, and the run
// succeeds.
func TestWorkerKilledMidAttempt(t *testing.T) {
	const rescueAfter = 2 * time.Second
	// The first call of every run is held until its client goes away.
	respond := func(ctx context.Context, c invariant.Call) int {
		if c.Attempt == 1 {
			<-ctx.Done()
		}
		return http.StatusOK
	}
	tgt := invariant.NewTarget(invariant.TargetConfig{Respond: respond})
	c := newCluster(t, tgt, clusterConfig{
		Kinds: []kindConfig{{Name: "build", MaxAttempts: 5, Initial: 20 * time.Millisecond, Max: 100 * time.Millisecond,
			Concurrency: 4, Timeout: time.Minute}},
		RescueAfter: rescueAfter,
	})
	ctx := t.Context()
	c.start("api", "api")
	workers := map[string]*cvproc.Process{"w1": c.start("worker", "w1"), "w2": c.start("worker", "w2")}

	s, ans := c.mustSubmit(ctx, "build", "app/killed", 1)
	first := c.waitCall(ans.Run.ID)
	victim := first.Path[strings.LastIndex(first.Path, "/")+1:]
	p := workers[victim]
	if p == nil {
		t.Fatalf("call from unknown process %q", first.Path)
	}
	// Kill it after a heartbeat has renewed the lease.
	leaseExpiry := func() time.Time {
		var at time.Time
		if err := c.pool.QueryRow(ctx, `SELECT lease_expires_at FROM converge_streams WHERE kind = 'build' AND resource = 'app/killed'`).Scan(&at); err != nil {
			t.Fatalf("read lease: %v", err)
		}
		return at
	}
	taken := leaseExpiry()
	testkit.WaitFor(t, 30*time.Second, "a heartbeat", func() bool { return leaseExpiry().After(taken) })
	killed := time.Now()
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	expiry := leaseExpiry() // nobody renews it any more
	rv := c.waitRun(ctx, ans.Event.ID, "run succeeded", func(r runView) bool { return r.Status == "succeeded" })
	if got := strings.Join(rv.outcomes(), ","); got != "abandoned,succeeded" || rv.Attempts != 2 {
		t.Errorf("run after the kill: attempts %d, outcomes %s; want 2: abandoned,succeeded", rv.Attempts, got)
	}
	calls := tgt.Calls()
	if len(calls) != 2 {
		t.Fatalf("target saw %d calls, want 2: %v", len(calls), calls)
	}
	lost, again := calls[0], calls[1]
	if lost.Outcome != invariant.CallCancelled || again.Outcome != invariant.CallSucceeded || again.Attempt != 2 {
		t.Errorf("calls: %s; %s — want the first cancelled (its worker died), the second attempt 2 succeeded", lost, again)
	}
	if strings.HasSuffix(again.Path, "/"+victim) {
		t.Errorf("attempt 2 was made by %s, the killed worker", victim)
	}
	// The dead worker's lease holds the stream until it expires (the
	// target and PostgreSQL share this host's clock).
	if again.Start.Before(expiry) {
		t.Errorf("attempt 2 started at %s, before the dead worker's lease expired at %s", again.Start, expiry)
	}
	t.Logf("worker %s killed; target noticed after %s; lease expired %s after the kill; attempt 2 by %s started %s after the kill",
		victim, lost.End.Sub(killed).Round(time.Millisecond), expiry.Sub(killed).Round(time.Millisecond), again.Path,
		again.Start.Sub(killed).Round(time.Millisecond))

	c.waitSettled(ctx, 30*time.Second, false)
	c.stopAll()
	rep := c.check(ctx, invariant.Params{Submissions: []invariant.Submission{s}})
	if rep.AbandonedAttempts != 1 {
		t.Errorf("abandoned attempts: %d, want 1", rep.AbandonedAttempts)
	}
}

// TestWorkerCutOffFromDatabase: the worker holding a stream's lease loses
// its database (a partition: its connections hang) while its call is in
// flight. Another worker takes the stream over once the lease has expired;
// the cut-off worker must have stopped its call by then (G3), although it
// could not learn that its lease was gone.
func TestWorkerCutOffFromDatabase(t *testing.T) {
	const rescueAfter = 2 * time.Second
	respond := func(ctx context.Context, c invariant.Call) int {
		if c.Attempt == 1 {
			<-ctx.Done()
		}
		return http.StatusOK
	}
	tgt := invariant.NewTarget(invariant.TargetConfig{Respond: respond})
	c := newCluster(t, tgt, clusterConfig{
		Kinds: []kindConfig{{Name: "build", MaxAttempts: 5, Initial: 20 * time.Millisecond, Max: 100 * time.Millisecond,
			Concurrency: 4, Timeout: time.Minute}},
		RescueAfter: rescueAfter,
	})
	ctx := t.Context()
	u, err := url.Parse(c.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	px := newProxy(t, u.Host)
	c.dbHost = map[string]string{"w1": px.Addr()}
	c.start("api", "api")
	c.start("worker", "w1")
	s, ans := c.mustSubmit(ctx, "build", "app/cut-off", 1)
	c.waitCall(ans.Run.ID)
	c.start("worker", "w2")
	px.Freeze()
	frozen := time.Now()

	var second invariant.Call
	testkit.WaitFor(t, 30*time.Second, "attempt 2", func() bool {
		for _, cl := range append(tgt.InFlight(), tgt.Calls()...) {
			if cl.RunID == ans.Run.ID && cl.Attempt == 2 {
				second = cl
				return true
			}
		}
		return false
	})
	var first invariant.Call
	for _, cl := range tgt.Calls() {
		if cl.RunID == ans.Run.ID && cl.Attempt == 1 {
			first = cl
		}
	}
	if first.End.IsZero() {
		t.Errorf("attempt 2 started %s after the partition while attempt 1 is still in flight", second.Start.Sub(frozen).Round(time.Millisecond))
	} else {
		t.Logf("partition at 0; attempt 1 stopped by its worker at %s; attempt 2 (%s) started at %s",
			first.End.Sub(frozen).Round(time.Millisecond), second.Path, second.Start.Sub(frozen).Round(time.Millisecond))
	}
	px.Thaw()
	c.waitRun(ctx, ans.Event.ID, "run succeeded", func(r runView) bool { return r.Status == "succeeded" })
	c.waitSettled(ctx, 30*time.Second, false)
	c.stopAll()
	c.check(ctx, invariant.Params{Submissions: []invariant.Submission{s}})
}
