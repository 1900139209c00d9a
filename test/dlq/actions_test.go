package dlq_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/store"
	"github.com/converge-run/converge/target"
	"github.com/converge-run/converge/test/testkit"
)

// auditEntry is an item of GET /v1/audit.
type auditEntry struct {
	ID        uuid.UUID      `json:"id"`
	At        time.Time      `json:"at"`
	Actor     string         `json:"actor"`
	Role      string         `json:"role"`
	Action    string         `json:"action"`
	Targets   []string       `json:"targets"`
	Reason    string         `json:"reason"`
	RequestID string         `json:"request_id"`
	Detail    map[string]any `json:"detail"`
}

// audit returns the dead-letter entries of the audit log, newest first.
func (s *stack) audit(t *testing.T) []auditEntry {
	t.Helper()
	r := s.do(t, s.viewer, http.MethodGet, "/v1/audit?limit=500", nil)
	want(t, r, http.StatusOK)
	var page struct {
		Items []auditEntry `json:"items"`
	}
	r.decode(t, &page)
	var out []auditEntry
	for _, e := range page.Items {
		if strings.HasPrefix(e.Action, "dead_letter.") {
			out = append(out, e)
		}
	}
	return out
}

func strs(ids ...uuid.UUID) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = id.String()
	}
	return out
}

// TestDeadLetterRedriveRuns is the whole loop with real River workers: a run
// fails permanently and is dead-lettered, the target is fixed, a redrive
// starts run number 2 with fresh attempts and the kind's max_attempts, and
// it succeeds.
func TestDeadLetterRedriveRuns(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{workers: true})
	s.target.set(func(req target.Request) error { return permanent("http status 404: no such image") })
	// Accepted with max_attempts 1; the configuration says 2 for build.
	res := s.accept(t, "build", "app/redrive", 1, 1)
	testkit.WaitFor(t, 20*time.Second, "the dead letter", func() bool {
		return s.count(t, `SELECT count(*) FROM converge_dead_letters WHERE run_id = $1`, res.Run.ID) == 1
	})
	d := s.deadLetterOf(t, res.Run.ID)
	if d.Reason != converge.ReasonPermanentError || d.Attempts != 1 || len(d.Errors) != 1 || d.Errors[0].Message != "http status 404: no such image" {
		t.Fatalf("dead letter %+v", d)
	}
	// River's cleaner deletes finished jobs; nothing of ours depends on them.
	if _, err := s.pool.Exec(context.WithoutCancel(t.Context()), `DELETE FROM river_job WHERE state IN ('completed', 'cancelled', 'discarded')`); err != nil {
		t.Fatal(err)
	}

	s.target.set(nil)
	r := s.do(t, s.operator, http.MethodPost, "/v1/dead-letters/"+d.ID.String()+"/redrive", `{"reason": "image pushed again"}`)
	want(t, r, http.StatusAccepted)
	var body struct {
		Run *converge.Run `json:"run"`
	}
	r.decode(t, &body)
	run := body.Run
	if run == nil || run.EventID != res.Event.ID || run.Number != 2 || run.Attempts != 0 || run.MaxAttempts != 2 ||
		run.Status != converge.RunQueued || run.ID == res.Run.ID || run.FinishedAt != nil || run.Error != nil {
		t.Fatalf("redrive answered %s", r.body)
	}
	testkit.WaitFor(t, 20*time.Second, "run 2 to succeed", func() bool {
		got, err := s.store.RunGet(t.Context(), run.ID)
		return err == nil && got.Status == converge.RunSucceeded
	})
	ev, err := s.store.EventGet(t.Context(), res.Event.ID)
	if err != nil {
		t.Fatal(err)
	}
	if ev.Status != converge.RunSucceeded || len(ev.Runs) != 2 || ev.Runs[0].Status != converge.RunFailed ||
		ev.Runs[1].Attempts != 1 || len(ev.Runs[1].AttemptHistory) != 1 || ev.Runs[1].AttemptHistory[0].Outcome != converge.OutcomeSucceeded {
		t.Fatalf("event after the redrive: %+v", ev)
	}
	var run2Calls int
	for _, c := range s.target.log() {
		if c.RunID == run.ID {
			run2Calls++
			if c.Attempt != 1 {
				t.Fatalf("run 2 called with attempt %d, want 1 (fresh attempts)", c.Attempt)
			}
		}
	}
	if run2Calls != 1 {
		t.Fatalf("run 2 called %d times", run2Calls)
	}
	d, err = s.store.DeadLetterGet(t.Context(), d.ID)
	if err != nil {
		t.Fatal(err)
	}
	if d.Status != converge.DeadLetterRedriven || d.ResolvedAt == nil || d.ResolvedBy == nil || *d.ResolvedBy != "operator-1" {
		t.Fatalf("dead letter after redrive: %+v", d)
	}
	if st, err := s.store.StreamGet(t.Context(), "build", "app/redrive"); err != nil || st.AppliedVersion == nil || *st.AppliedVersion != 1 {
		t.Fatalf("stream %+v, %v", st, err)
	}
	entries := s.audit(t)
	if len(entries) != 1 {
		t.Fatalf("audit %+v, want one redrive", entries)
	}
	e := entries[0]
	if e.Action != "dead_letter.redrive" || e.Actor != "operator-1" || e.Role != "operator" || !slices.Equal(e.Targets, strs(d.ID)) ||
		e.Reason != "image pushed again" || e.RequestID == "" || e.RequestID != r.header.Get("X-Request-Id") || e.At.IsZero() {
		t.Fatalf("audit entry %+v (request id %q)", e, r.header.Get("X-Request-Id"))
	}
	if ids, _ := e.Detail["run_ids"].([]any); len(ids) != 1 || ids[0] != run.ID.String() {
		t.Fatalf("audit detail %+v, want the new run", e.Detail)
	}
	wantProblem(t, s.do(t, s.operator, http.MethodPost, "/v1/dead-letters/"+d.ID.String()+"/redrive", nil), http.StatusConflict, "not-open")
}

func TestDeadLetterRedriveConflicts(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	post := func(id uuid.UUID, action string) *response {
		return s.do(t, s.operator, http.MethodPost, "/v1/dead-letters/"+id.String()+"/"+action, nil)
	}
	runs := func() int { return s.count(t, `SELECT count(*) FROM converge_runs`) }

	discarded := s.deadLetter(t, "build", "app/discarded", 1, converge.ClassPermanent, "boom")
	want(t, post(discarded.ID, "discard"), http.StatusOK)
	before := runs()
	wantProblem(t, post(discarded.ID, "redrive"), http.StatusConflict, "not-open")
	wantProblem(t, post(discarded.ID, "discard"), http.StatusConflict, "not-open")
	if runs() != before {
		t.Fatal("a refused redrive added a run")
	}

	// A newer version accepted since: redriving would go backwards.
	stale := s.deadLetter(t, "build", "app/stale", 1, converge.ClassPermanent, "boom")
	s.accept(t, "build", "app/stale", 2, 1)
	before = runs()
	wantProblem(t, post(stale.ID, "redrive"), http.StatusConflict, "superseded")
	if runs() != before {
		t.Fatal("a refused redrive added a run")
	}
	if got, _ := s.store.DeadLetterGet(t.Context(), stale.ID); got.Status != converge.DeadLetterOpen {
		t.Fatalf("status %s after a refused redrive", got.Status)
	}
	// It can still be discarded.
	want(t, post(stale.ID, "discard"), http.StatusOK)

	redriven := s.deadLetter(t, "build", "app/twice", 1, converge.ClassPermanent, "boom")
	want(t, post(redriven.ID, "redrive"), http.StatusAccepted)
	before = runs()
	wantProblem(t, post(redriven.ID, "redrive"), http.StatusConflict, "not-open")
	wantProblem(t, post(redriven.ID, "discard"), http.StatusConflict, "not-open")
	if runs() != before {
		t.Fatal("a refused redrive added a run")
	}

	wantProblem(t, post(uuid.New(), "redrive"), http.StatusNotFound, "not-found")
	wantProblem(t, post(uuid.New(), "discard"), http.StatusNotFound, "not-found")
	// Unknown body fields are refused, and nothing happens.
	open := s.deadLetter(t, "build", "app/body", 1, converge.ClassPermanent, "boom")
	wantProblem(t, s.do(t, s.operator, http.MethodPost, "/v1/dead-letters/"+open.ID.String()+"/redrive", `{"reasn": "typo"}`), http.StatusUnprocessableEntity, "invalid-request")
	wantProblem(t, s.do(t, s.operator, http.MethodPost, "/v1/dead-letters/"+open.ID.String()+"/discard", `{"reason": 5}`), http.StatusUnprocessableEntity, "invalid-request")
	wantProblem(t, s.do(t, s.operator, http.MethodPost, "/v1/dead-letters/"+open.ID.String()+"/redrive", `{"reason": "`+strings.Repeat("x", 1001)+`"}`), http.StatusUnprocessableEntity, "invalid-request")
	wantProblem(t, s.do(t, s.operator, http.MethodPost, "/v1/dead-letters/"+open.ID.String()+"/redrive", `{`), http.StatusBadRequest, "malformed-json")
	if got, _ := s.store.DeadLetterGet(t.Context(), open.ID); got.Status != converge.DeadLetterOpen {
		t.Fatalf("status %s after refused requests", got.Status)
	}
}

func TestDeadLetterDiscard(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	d := s.deadLetter(t, "deploy", "prod/discard", 3, converge.ClassTransient, "timeout")
	r := s.do(t, s.operator, http.MethodPost, "/v1/dead-letters/"+d.ID.String()+"/discard", `{"reason": "known flaky host"}`)
	want(t, r, http.StatusOK)
	var got converge.DeadLetter
	r.decode(t, &got)
	if got.ID != d.ID || got.Status != converge.DeadLetterDiscarded || got.ResolvedAt == nil || got.ResolvedBy == nil ||
		*got.ResolvedBy != "operator-1" || got.Reason != converge.ReasonAttemptsExhausted {
		t.Fatalf("discard answered %s", r.body)
	}
	entries := s.audit(t)
	if len(entries) != 1 || entries[0].Action != "dead_letter.discard" || entries[0].Actor != "operator-1" || entries[0].Role != "operator" ||
		!slices.Equal(entries[0].Targets, strs(d.ID)) || entries[0].Reason != "known flaky host" || entries[0].RequestID != r.header.Get("X-Request-Id") {
		t.Fatalf("audit %+v", entries)
	}
	// The admin token is an operator named admin.
	d2 := s.deadLetter(t, "deploy", "prod/discard2", 1, converge.ClassTransient, "timeout")
	r = s.do(t, adminToken, http.MethodPost, "/v1/dead-letters/"+d2.ID.String()+"/discard", nil)
	want(t, r, http.StatusOK)
	r.decode(t, &got)
	if *got.ResolvedBy != "admin" {
		t.Fatalf("resolved by %q, want admin", *got.ResolvedBy)
	}
	if e := s.audit(t)[0]; e.Actor != "admin" || e.Reason != "" {
		t.Fatalf("audit %+v", e)
	}
}

// TestDeadLetterSupersededBySuccess: when a newer version of the stream
// succeeds, its older open dead letters become superseded, and a redrive
// of one is refused as superseded.
func TestDeadLetterSupersededBySuccess(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	old := s.deadLetter(t, "build", "app/sup", 1, converge.ClassPermanent, "boom")
	other := s.deadLetter(t, "build", "app/sup-other", 1, converge.ClassPermanent, "boom")
	res := s.accept(t, "build", "app/sup", 2, 1)
	ctx := context.WithoutCancel(t.Context())
	var jobID int64
	if err := s.pool.QueryRow(ctx, `SELECT job_id FROM converge_runs WHERE id = $1`, res.Run.ID).Scan(&jobID); err != nil {
		t.Fatal(err)
	}
	ticket, err := s.store.AttemptBegin(ctx, res.Run.ID, jobID, time.Minute)
	if err != nil || ticket.Decision != converge.DecisionCall {
		t.Fatalf("begin: %+v, %v", ticket, err)
	}
	if _, err := s.store.AttemptFinish(ctx, store.AttemptFinishParams{Run: ticket.Run, Attempt: ticket.Attempt, Started: time.Now()}); err != nil {
		t.Fatal(err)
	}
	r := s.do(t, s.viewer, http.MethodGet, "/v1/dead-letters/"+old.ID.String(), nil)
	want(t, r, http.StatusOK)
	var got converge.DeadLetter
	r.decode(t, &got)
	if got.Status != converge.DeadLetterSuperseded || got.SupersededByVersion == nil || *got.SupersededByVersion != 2 || got.ResolvedAt == nil {
		t.Fatalf("old dead letter %s", r.body)
	}
	if p := s.list(t, "status=superseded"); len(p.Items) != 1 || p.Items[0].ID != old.ID {
		t.Fatalf("superseded list %v", ids(p.Items))
	}
	if got, _ := s.store.DeadLetterGet(t.Context(), other.ID); got.Status != converge.DeadLetterOpen {
		t.Fatalf("another stream's dead letter is %s", got.Status)
	}
	// Redriving it is refused as superseded (SPEC §4), one by one or in
	// bulk, by id or by filter; discarding it, as not open.
	before := s.snapshot(t)
	wantProblem(t, s.do(t, s.operator, http.MethodPost, "/v1/dead-letters/"+old.ID.String()+"/redrive", nil), http.StatusConflict, "superseded")
	if res := s.bulk(t, "redrive", map[string]any{"ids": []uuid.UUID{old.ID}}); len(res.Done) != 0 || fmt.Sprint(res.skips()) != fmt.Sprint(map[uuid.UUID]string{old.ID: "superseded"}) {
		t.Fatalf("bulk redrive by id: %+v", res)
	}
	if res := s.bulk(t, "redrive", map[string]any{"filter": map[string]string{"status": "superseded"}, "dry_run": true}); len(res.Done) != 0 ||
		fmt.Sprint(res.skips()) != fmt.Sprint(map[uuid.UUID]string{old.ID: "superseded"}) {
		t.Fatalf("bulk redrive by filter: %+v", res)
	}
	wantProblem(t, s.do(t, s.operator, http.MethodPost, "/v1/dead-letters/"+old.ID.String()+"/discard", nil), http.StatusConflict, "not-open")
	if after := s.snapshot(t); after != before {
		t.Fatalf("a refused action changed something:\n%s\n%s", before, after)
	}
}

// bulkResult is the answer of a bulk action.
type bulkResult struct {
	Done    []uuid.UUID `json:"done"`
	Skipped []struct {
		ID     uuid.UUID `json:"id"`
		Reason string    `json:"reason"`
	} `json:"skipped"`
	More   bool `json:"more"`
	DryRun bool `json:"dry_run"`
}

func (b bulkResult) skips() map[uuid.UUID]string {
	m := map[uuid.UUID]string{}
	for _, s := range b.Skipped {
		m[s.ID] = s.Reason
	}
	return m
}

func (s *stack) bulk(t *testing.T, action string, body any) bulkResult {
	t.Helper()
	r := s.do(t, s.operator, http.MethodPost, "/v1/dead-letters/"+action, body)
	want(t, r, http.StatusOK)
	var res bulkResult
	r.decode(t, &res)
	if res.Done == nil || res.Skipped == nil {
		t.Fatalf("done and skipped must be arrays: %s", r.body)
	}
	return res
}

// snapshot is what a dry run must leave as it was.
func (s *stack) snapshot(t *testing.T) string {
	t.Helper()
	var out string
	err := s.pool.QueryRow(context.WithoutCancel(t.Context()), `SELECT
		(SELECT string_agg(id::text || status, ',' ORDER BY id) FROM converge_dead_letters) || '|' ||
		(SELECT count(*) FROM converge_runs) || '|' || (SELECT count(*) FROM converge_audit) || '|' ||
		(SELECT count(*) FROM river_job)`).Scan(&out)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestDeadLetterBulkByIDs(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	a1 := s.deadLetter(t, "build", "app/b1", 1, converge.ClassPermanent, "boom")
	a2 := s.deadLetter(t, "deploy", "app/b2", 1, converge.ClassTransient, "boom")
	a3 := s.deadLetter(t, "build", "app/b3", 1, converge.ClassPermanent, "boom")
	s.accept(t, "build", "app/b3", 2, 1) // a3 is superseded by an accepted newer version
	a4 := s.deadLetter(t, "build", "app/b4", 1, converge.ClassPermanent, "boom")
	want(t, s.do(t, s.operator, http.MethodPost, "/v1/dead-letters/"+a4.ID.String()+"/discard", nil), http.StatusOK)
	unknown := uuid.New()
	all := []uuid.UUID{a1.ID, a2.ID, a3.ID, a4.ID, unknown, a1.ID}
	wantSkips := map[uuid.UUID]string{a3.ID: "superseded", a4.ID: "not-open", unknown: "not-found"}

	before := s.snapshot(t)
	res := s.bulk(t, "redrive", map[string]any{"ids": all, "dry_run": true, "reason": "try"})
	if !slices.Equal(res.Done, []uuid.UUID{a1.ID, a2.ID}) || fmt.Sprint(res.skips()) != fmt.Sprint(wantSkips) || !res.DryRun {
		t.Fatalf("dry run: %+v", res)
	}
	if after := s.snapshot(t); after != before {
		t.Fatalf("a dry run changed something:\n%s\n%s", before, after)
	}

	r := s.do(t, s.operator, http.MethodPost, "/v1/dead-letters/redrive", map[string]any{"ids": all, "reason": "upstream fixed"})
	want(t, r, http.StatusOK)
	var got bulkResult
	r.decode(t, &got)
	if !slices.Equal(got.Done, []uuid.UUID{a1.ID, a2.ID}) || fmt.Sprint(got.skips()) != fmt.Sprint(wantSkips) || got.DryRun {
		t.Fatalf("redrive: %s", r.body)
	}
	for _, d := range []*converge.DeadLetter{a1, a2} {
		ev, err := s.store.EventGet(t.Context(), d.EventID)
		if err != nil {
			t.Fatal(err)
		}
		if len(ev.Runs) != 2 || ev.Runs[1].Number != 2 || ev.Runs[1].Status != converge.RunQueued || ev.Status != converge.RunQueued {
			t.Fatalf("event %s runs %+v", ev.ID, ev.Runs)
		}
		if d.Kind == "deploy" && ev.Runs[1].MaxAttempts != 1 || d.Kind == "build" && ev.Runs[1].MaxAttempts != 2 {
			t.Fatalf("%s run has max_attempts %d", d.Kind, ev.Runs[1].MaxAttempts)
		}
		if got, _ := s.store.DeadLetterGet(t.Context(), d.ID); got.Status != converge.DeadLetterRedriven {
			t.Fatalf("status %s", got.Status)
		}
	}
	entries := s.audit(t)
	e := entries[0]
	if e.Action != "dead_letter.redrive" || !slices.Equal(e.Targets, strs(a1.ID, a2.ID)) || e.Reason != "upstream fixed" ||
		e.Actor != "operator-1" || e.Role != "operator" || e.RequestID != r.header.Get("X-Request-Id") {
		t.Fatalf("audit %+v", e)
	}

	res = s.bulk(t, "discard", map[string]any{"ids": []uuid.UUID{a1.ID, a3.ID, unknown}})
	if !slices.Equal(res.Done, []uuid.UUID{a3.ID}) || fmt.Sprint(res.skips()) != fmt.Sprint(map[uuid.UUID]string{a1.ID: "not-open", unknown: "not-found"}) {
		t.Fatalf("discard: %+v", res)
	}
	// All skipped: nothing done, nothing audited.
	n := len(s.audit(t))
	res = s.bulk(t, "discard", map[string]any{"ids": []uuid.UUID{a1.ID, a3.ID}})
	if len(res.Done) != 0 || len(res.Skipped) != 2 || len(s.audit(t)) != n {
		t.Fatalf("discard of resolved dead letters: %+v", res)
	}
}

func TestDeadLetterBulkByFilter(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	b1 := s.deadLetter(t, "deploy", "prod/f1", 1, converge.ClassTransient, "connection refused")
	b2 := s.deadLetter(t, "deploy", "prod/f2", 1, converge.ClassTransient, "connection refused")
	b3 := s.deadLetter(t, "build", "prod/f3", 1, converge.ClassTransient, "connection refused")
	b4 := s.deadLetter(t, "deploy", "staging/f4", 1, converge.ClassTransient, "connection refused")
	filter := map[string]string{"kind": "deploy", "resource": "prod/", "q": "refused"}

	before := s.snapshot(t)
	res := s.bulk(t, "discard", map[string]any{"filter": filter, "dry_run": true})
	if !slices.Equal(res.Done, []uuid.UUID{b2.ID, b1.ID}) || len(res.Skipped) != 0 || res.More {
		t.Fatalf("dry run: %+v", res)
	}
	if s.snapshot(t) != before {
		t.Fatal("a dry run changed something")
	}
	res = s.bulk(t, "discard", map[string]any{"filter": filter, "reason": "host retired"})
	if !slices.Equal(res.Done, []uuid.UUID{b2.ID, b1.ID}) {
		t.Fatalf("discard: %+v", res)
	}
	// The filter's status defaults to open: a second call finds nothing.
	if res = s.bulk(t, "discard", map[string]any{"filter": filter}); len(res.Done) != 0 {
		t.Fatalf("second discard: %+v", res)
	}
	// An explicit status selects resolved ones, which are skipped.
	res = s.bulk(t, "redrive", map[string]any{"filter": map[string]string{"status": "discarded"}})
	if len(res.Done) != 0 || fmt.Sprint(res.skips()) != fmt.Sprint(map[uuid.UUID]string{b1.ID: "not-open", b2.ID: "not-open"}) {
		t.Fatalf("redrive of discarded: %+v", res)
	}
	res = s.bulk(t, "redrive", map[string]any{"filter": map[string]string{}})
	if !slices.Equal(res.Done, []uuid.UUID{b4.ID, b3.ID}) {
		t.Fatalf("redrive of every open one: %+v", res)
	}
}

// TestDeadLetterBulkCap: 1000 dead letters per call at most.
func TestDeadLetterBulkCap(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	ctx := context.WithoutCancel(t.Context())
	// 1001 failed runs, each dead-lettered by the database's trigger.
	_, err := s.pool.Exec(ctx, `
		WITH ev AS (
			INSERT INTO converge_events (id, kind, resource, version, payload)
			SELECT converge_uuid_v7(), 'build', 'app/cap-' || g, 1, '{}' FROM generate_series(1, 1001) g
			RETURNING id, kind, resource, version)
		INSERT INTO converge_runs (id, event_id, number, kind, resource, version, status, attempts, max_attempts, started_at)
		SELECT converge_uuid_v7(), id, 1, kind, resource, version, 'running', 1, 1, now() FROM ev`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.pool.Exec(ctx, `INSERT INTO converge_streams (kind, resource, latest_version) SELECT kind, resource, 1 FROM converge_events`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.pool.Exec(ctx, `UPDATE converge_runs SET status = 'failed', finished_at = now(), error = '{"class": "permanent", "message": "boom"}'`); err != nil {
		t.Fatal(err)
	}
	if n := s.count(t, `SELECT count(*) FROM converge_dead_letters WHERE status = 'open'`); n != 1001 {
		t.Fatalf("%d dead letters", n)
	}

	before := s.snapshot(t)
	tooMany := make([]uuid.UUID, 1001)
	for i := range tooMany {
		tooMany[i] = uuid.New()
	}
	for _, action := range []string{"redrive", "discard"} {
		p := wantProblem(t, s.do(t, s.operator, http.MethodPost, "/v1/dead-letters/"+action, map[string]any{"ids": tooMany}), http.StatusUnprocessableEntity, "invalid-request")
		if len(p.Errors) == 0 || p.Errors[0].Field != "ids" {
			t.Fatalf("errors %+v", p.Errors)
		}
	}
	if s.snapshot(t) != before {
		t.Fatal("a refused bulk call changed something")
	}
	if res := s.bulk(t, "discard", map[string]any{"ids": tooMany[:1000]}); len(res.Skipped) != 1000 || len(res.Done) != 0 {
		t.Fatalf("1000 unknown ids: %d done, %d skipped", len(res.Done), len(res.Skipped))
	}

	res := s.bulk(t, "redrive", map[string]any{"filter": map[string]string{}, "dry_run": true})
	if len(res.Done) != 1000 || !res.More {
		t.Fatalf("dry run by filter: %d done, more %t", len(res.Done), res.More)
	}
	res = s.bulk(t, "redrive", map[string]any{"filter": map[string]string{"kind": "build"}})
	if len(res.Done) != 1000 || !res.More {
		t.Fatalf("redrive by filter: %d done, more %t", len(res.Done), res.More)
	}
	if n := s.count(t, `SELECT count(*) FROM converge_runs WHERE number = 2`); n != 1000 {
		t.Fatalf("%d new runs", n)
	}
	if e := s.audit(t)[0]; len(e.Targets) != 1000 {
		t.Fatalf("audit targets %d", len(e.Targets))
	}
	res = s.bulk(t, "redrive", map[string]any{"filter": map[string]string{"kind": "build"}})
	if len(res.Done) != 1 || res.More {
		t.Fatalf("the rest: %d done, more %t", len(res.Done), res.More)
	}
}

func TestDeadLetterBulkBadBodies(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	d := s.deadLetter(t, "build", "app/badbody", 1, converge.ClassPermanent, "boom")
	id := d.ID.String()
	cases := []struct {
		name, body string
		status     int
		slug       string
		field      string
	}{
		{"empty body", "", 422, "invalid-request", "ids"},
		{"neither", `{}`, 422, "invalid-request", "ids"},
		{"neither, dry run", `{"dry_run": true}`, 422, "invalid-request", "ids"},
		{"both", `{"ids": ["` + id + `"], "filter": {}}`, 422, "invalid-request", "ids"},
		{"no ids", `{"ids": []}`, 422, "invalid-request", "ids"},
		{"bad id", `{"ids": ["` + id + `", "nope"]}`, 422, "invalid-request", "ids[1]"},
		{"ids not a list", `{"ids": "` + id + `"}`, 422, "invalid-request", "ids"},
		{"bad status", `{"filter": {"status": "closed"}}`, 422, "invalid-request", "filter.status"},
		{"bad reason", `{"filter": {"reason": "boom"}}`, 422, "invalid-request", "filter.reason"},
		{"bad since", `{"filter": {"since": "yesterday"}}`, 422, "invalid-request", "filter.since"},
		{"since after until", `{"filter": {"since": "2024-02-01T00:00:00Z", "until": "2024-01-01T00:00:00Z"}}`, 422, "invalid-request", "filter.until"},
		{"long q", `{"filter": {"q": "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}}`, 422, "invalid-request", "filter.q"},
		{"unknown filter", `{"filter": {"colour": "red"}}`, 422, "invalid-request", "filter.colour"},
		{"filter value not a string", `{"filter": {"kind": 5}}`, 422, "invalid-request", "filter.kind"},
		{"unknown filter, not a string", `{"filter": {"bogus": 1}}`, 422, "invalid-request", "filter.bogus"},
		{"unknown field", `{"ids": ["` + id + `"], "force": true}`, 422, "invalid-request", "force"},
		{"long reason", `{"ids": ["` + id + `"], "reason": "` + strings.Repeat("r", 1001) + `"}`, 422, "invalid-request", "reason"},
		{"not JSON", `{"ids": [`, 400, "malformed-json", ""},
	}
	before := s.snapshot(t)
	for _, c := range cases {
		for _, action := range []string{"redrive", "discard"} {
			t.Run(action+" "+c.name, func(t *testing.T) {
				p := wantProblem(t, s.do(t, s.operator, http.MethodPost, "/v1/dead-letters/"+action, c.body), c.status, c.slug)
				if c.field != "" && !slices.ContainsFunc(p.Errors, func(e converge.FieldError) bool { return e.Field == c.field }) {
					t.Fatalf("errors %+v do not name %s", p.Errors, c.field)
				}
			})
		}
	}
	if s.snapshot(t) != before {
		t.Fatal("a refused bulk call changed something")
	}
	// A body that is not JSON by Content-Type is refused too.
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, s.url+"/v1/dead-letters/redrive", strings.NewReader(`{"ids": ["`+id+`"]}`))
	req.Header.Set("Authorization", "Bearer "+s.operator)
	req.Header.Set("Content-Type", "text/plain")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnsupportedMediaType {
		t.Fatalf("text/plain body: status %d", resp.StatusCode)
	}
}

func TestDeadLetterPurge(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	ctx := context.WithoutCancel(t.Context())
	old := s.deadLetter(t, "build", "app/p1", 1, converge.ClassPermanent, "boom")
	recent := s.deadLetter(t, "build", "app/p2", 1, converge.ClassPermanent, "boom")
	open := s.deadLetter(t, "build", "app/p3", 1, converge.ClassPermanent, "boom")
	redriven := s.deadLetter(t, "build", "app/p4", 1, converge.ClassPermanent, "boom")
	for _, d := range []*converge.DeadLetter{old, recent} {
		want(t, s.do(t, s.operator, http.MethodPost, "/v1/dead-letters/"+d.ID.String()+"/discard", nil), http.StatusOK)
	}
	want(t, s.do(t, s.operator, http.MethodPost, "/v1/dead-letters/"+redriven.ID.String()+"/redrive", nil), http.StatusAccepted)
	if _, err := s.pool.Exec(ctx, `UPDATE converge_dead_letters SET created_at = now() - interval '90 days',
		resolved_at = CASE WHEN id = $1 THEN now() - interval '48 hours' ELSE resolved_at END`, old.ID); err != nil {
		t.Fatal(err)
	}
	// open and redriven ones are old too, but only discarded ones are purged.
	if _, err := s.pool.Exec(ctx, `UPDATE converge_dead_letters SET resolved_at = now() - interval '48 hours' WHERE id = $1`, redriven.ID); err != nil {
		t.Fatal(err)
	}

	for _, body := range []string{`{"older_than": ""}`, `{"older_than": "-1h"}`, `{"older_than": "soon"}`, `{"older_than": 3600}`, `{"older_than": "1h", "ids": []}`} {
		wantProblem(t, s.do(t, s.operator, http.MethodPost, "/v1/dead-letters/purge", body), http.StatusUnprocessableEntity, "invalid-request")
	}
	before := s.snapshot(t)
	r := s.do(t, s.operator, http.MethodPost, "/v1/dead-letters/purge", `{"older_than": "24h", "dry_run": true}`)
	want(t, r, http.StatusOK)
	var res converge.DeadLetterPurgeResult
	r.decode(t, &res)
	if !slices.Equal(res.Purged, []uuid.UUID{old.ID}) || !res.DryRun || res.More {
		t.Fatalf("dry run: %s", r.body)
	}
	if s.snapshot(t) != before {
		t.Fatal("a dry run changed something")
	}
	r = s.do(t, s.operator, http.MethodPost, "/v1/dead-letters/purge", `{"older_than": "24h", "reason": "retention"}`)
	want(t, r, http.StatusOK)
	r.decode(t, &res)
	if !slices.Equal(res.Purged, []uuid.UUID{old.ID}) || res.DryRun {
		t.Fatalf("purge: %s", r.body)
	}
	wantProblem(t, s.do(t, s.viewer, http.MethodGet, "/v1/dead-letters/"+old.ID.String(), nil), http.StatusNotFound, "not-found")
	for _, d := range []*converge.DeadLetter{recent, open, redriven} {
		want(t, s.do(t, s.viewer, http.MethodGet, "/v1/dead-letters/"+d.ID.String(), nil), http.StatusOK)
	}
	// The run and event stay: runs are never deleted.
	if n := s.count(t, `SELECT count(*) FROM converge_runs WHERE id = $1`, old.RunID); n != 1 {
		t.Fatal("the purged dead letter's run is gone")
	}
	e := s.audit(t)[0]
	if e.Action != "dead_letter.purge" || !slices.Equal(e.Targets, strs(old.ID)) || e.Reason != "retention" || e.Actor != "operator-1" ||
		e.RequestID != r.header.Get("X-Request-Id") || e.Detail["older_than"] != "24h0m0s" {
		t.Fatalf("audit %+v", e)
	}
	// Nothing left to purge: nothing deleted, and the purge is audited
	// all the same (SPEC §4: every operator action is).
	n := len(s.audit(t))
	r = s.do(t, s.operator, http.MethodPost, "/v1/dead-letters/purge", `{"older_than": "24h"}`)
	want(t, r, http.StatusOK)
	r.decode(t, &res)
	if len(res.Purged) != 0 || len(s.audit(t)) != n+1 {
		t.Fatalf("second purge: %s", r.body)
	}
	if e := s.audit(t)[0]; e.Action != "dead_letter.purge" || len(e.Targets) != 0 || e.Detail["count"] != float64(0) ||
		e.RequestID != r.header.Get("X-Request-Id") {
		t.Fatalf("audit of an empty purge %+v", e)
	}
	// Without older_than (an empty body, or {}) every discarded dead letter
	// is purged, however recent its discard: recent (discarded minutes
	// ago) first, then one discarded just now.
	wantPurged := []uuid.UUID{recent.ID}
	for _, body := range []any{nil, `{}`} {
		other := s.deadLetter(t, "build", fmt.Sprintf("app/p5-%v", body != nil), 1, converge.ClassPermanent, "boom")
		want(t, s.do(t, s.operator, http.MethodPost, "/v1/dead-letters/"+other.ID.String()+"/discard", nil), http.StatusOK)
		wantPurged = append(wantPurged, other.ID)
		r = s.do(t, s.operator, http.MethodPost, "/v1/dead-letters/purge", body)
		want(t, r, http.StatusOK)
		r.decode(t, &res)
		if !slices.Equal(res.Purged, wantPurged) {
			t.Fatalf("purge with body %v: %s, want %v", body, r.body, wantPurged)
		}
		if e := s.audit(t)[0]; e.Action != "dead_letter.purge" || !slices.Equal(e.Targets, strs(wantPurged...)) || e.Detail["count"] != float64(len(wantPurged)) {
			t.Fatalf("audit of purge with body %v: %+v", body, e)
		} else if _, ok := e.Detail["older_than"]; ok {
			t.Fatalf("audit of purge with body %v names older_than: %+v", body, e)
		}
		wantPurged = nil
	}
	for _, d := range []*converge.DeadLetter{open, redriven} {
		want(t, s.do(t, s.viewer, http.MethodGet, "/v1/dead-letters/"+d.ID.String(), nil), http.StatusOK)
	}
}

// TestAuditPages: GET /v1/audit pages the log newest first with disjoint
// pages.
func TestAuditPages(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	var wantTargets []string
	for i := range 5 {
		d := s.deadLetter(t, "build", fmt.Sprintf("app/audit-%d", i), 1, converge.ClassPermanent, "boom")
		want(t, s.do(t, s.operator, http.MethodPost, "/v1/dead-letters/"+d.ID.String()+"/discard", fmt.Sprintf(`{"reason": "r%d"}`, i)), http.StatusOK)
		wantTargets = append([]string{d.ID.String()}, wantTargets...)
	}
	var got []string
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 10 {
			t.Fatal("pagination does not end")
		}
		r := s.do(t, s.viewer, http.MethodGet, "/v1/audit?limit=2&cursor="+cursor, nil)
		want(t, r, http.StatusOK)
		var page struct {
			Items      []auditEntry `json:"items"`
			NextCursor *string      `json:"next_cursor"`
		}
		r.decode(t, &page)
		for _, e := range page.Items {
			if e.Action == "dead_letter.discard" {
				got = append(got, e.Targets...)
			}
		}
		if page.NextCursor == nil {
			break
		}
		cursor = *page.NextCursor
	}
	if !slices.Equal(got, wantTargets) {
		t.Fatalf("audit targets %v, want %v", got, wantTargets)
	}
}
