package store_test

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/store"
)

// newApprovalWF is newWF with approval on the prod step (SPEC §10's
// release workflow as written).
func newApprovalWF(t *testing.T) *wf {
	t.Helper()
	w := newWF(t)
	def, err := converge.NewWorkflow("release", map[string]*converge.WorkflowStep{
		"build":   {Kind: "build"},
		"staging": {Kind: "deploy", Resource: "staging/{resource}", Needs: []string{"build"}},
		"canary":  {Kind: "deploy", Resource: "canary/{resource}", Needs: []string{"build"}},
		"prod":    {Kind: "deploy", Resource: "prod/{resource}", Needs: []string{"staging", "canary"}, Approval: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	w.def = def
	return w
}

// toProd starts the workflow for resource at version and runs it up to
// its held prod step, whose run it returns.
func (w *wf) toProd(t *testing.T, resource string, version int64) (uuid.UUID, uuid.UUID) {
	t.Helper()
	res, err := w.start(t, resource, version, `{}`)
	if err != nil {
		t.Fatal(err)
	}
	id := res.WorkflowRun.ID
	w.run(t, id, "build", `{}`, nil)
	w.run(t, id, "staging", `{}`, nil)
	w.run(t, id, "canary", `{}`, nil)
	for _, s := range w.get(t, id).Steps {
		if s.Name == "prod" && s.RunID != nil {
			return id, *s.RunID
		}
	}
	t.Fatal("prod step not accepted")
	return id, uuid.Nil
}

// heldState is "status hold job attempts" of run id.
func (w *wf) heldState(t *testing.T, id uuid.UUID) (converge.RunStatus, []string, *int64, int) {
	t.Helper()
	var st converge.RunStatus
	var hold []string
	var job *int64
	var attempts int
	if err := w.pool.QueryRow(t.Context(), `SELECT r.status, r.hold, r.job_id,
			(SELECT count(*) FROM converge_attempts a WHERE a.run_id = r.id) FROM converge_runs r WHERE r.id = $1`, id).
		Scan(&st, &hold, &job, &attempts); err != nil {
		t.Fatal(err)
	}
	return st, hold, job, attempts
}

func (w *wf) audits(t *testing.T, action string) int {
	t.Helper()
	var n int
	if err := w.pool.QueryRow(t.Context(), `SELECT count(*) FROM converge_audit WHERE action = $1`, action).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func wantCode(t *testing.T, err error, code string) {
	t.Helper()
	if converge.ErrorCode(err) != code {
		t.Fatalf("err = %v, want code %s", err, code)
	}
}

func TestApprovalStepWaitsThenContinues(t *testing.T) {
	t.Parallel()
	w := newApprovalWF(t)
	id, prod := w.toProd(t, "app/web", 1)
	st, hold, job, attempts := w.heldState(t, prod)
	if st != converge.RunHeld || !slices.Equal(hold, []string{"approval"}) || job != nil || attempts != 0 {
		t.Fatalf("prod run: %s %v job %v attempts %d, want held [approval] without a job or attempt", st, hold, job, attempts)
	}
	wantStatuses(t, w.statuses(t, id), "waiting build=succeeded canary=succeeded staging=succeeded prod=held")
	run, err := w.st.RunGet(t.Context(), prod)
	if err != nil || run.Status != converge.RunHeld || !slices.Equal(run.Hold, []string{"approval"}) {
		t.Fatalf("RunGet: %+v, %v", run, err)
	}

	run, err = w.st.RunApprove(t.Context(), prod, converge.AuditEntry{Actor: "op", Role: "operator"})
	if err != nil {
		t.Fatal(err)
	}
	if run.Status != converge.RunQueued || len(run.Hold) != 0 {
		t.Fatalf("approved run: %s %v", run.Status, run.Hold)
	}
	if _, _, job, _ := w.heldState(t, prod); job == nil {
		t.Fatal("approved run has no job")
	}
	wantStatuses(t, w.statuses(t, id), "running build=succeeded canary=succeeded staging=succeeded prod=queued")
	_, err = w.st.RunApprove(t.Context(), prod, converge.AuditEntry{Actor: "op", Role: "operator"})
	wantCode(t, err, converge.ENOTHELD)
	w.run(t, id, "prod", `{}`, nil)
	wantStatuses(t, w.statuses(t, id), "succeeded(final) build=succeeded canary=succeeded staging=succeeded prod=succeeded")
	if n := w.audits(t, "run.approve"); n != 1 {
		t.Fatalf("%d run.approve entries, want 1", n)
	}
}

func TestRejectCancelsHeldRun(t *testing.T) {
	t.Parallel()
	w := newApprovalWF(t)
	id, prod := w.toProd(t, "app/web", 1)
	run, err := w.st.RunReject(t.Context(), prod, converge.AuditEntry{Actor: "op", Role: "operator", Reason: "not today"})
	if err != nil {
		t.Fatal(err)
	}
	if run.Status != converge.RunCancelled || run.FinishedAt == nil {
		t.Fatalf("rejected run: %+v", run)
	}
	wantStatuses(t, w.statuses(t, id), "cancelled(final) build=succeeded canary=succeeded staging=succeeded prod=cancelled")
	_, err = w.st.RunReject(t.Context(), prod, converge.AuditEntry{Actor: "op", Role: "operator"})
	wantCode(t, err, converge.ENOTHELD)
	if n := w.audits(t, "run.reject"); n != 1 {
		t.Fatalf("%d run.reject entries, want 1", n)
	}
}

func TestApproveNotHeld(t *testing.T) {
	t.Parallel()
	w := newApprovalWF(t)
	res, err := w.start(t, "app/web", 1, `{}`)
	if err != nil {
		t.Fatal(err)
	}
	build := *res.WorkflowRun.Steps[0].RunID
	_, err = w.st.RunApprove(t.Context(), build, converge.AuditEntry{Actor: "op", Role: "operator"})
	wantCode(t, err, converge.ENOTHELD)
	_, err = w.st.RunReject(t.Context(), build, converge.AuditEntry{Actor: "op", Role: "operator"})
	wantCode(t, err, converge.ENOTHELD)
	_, err = w.st.RunApprove(t.Context(), uuid.New(), converge.AuditEntry{Actor: "op", Role: "operator"})
	if !errors.Is(err, converge.ErrNotFound) {
		t.Fatalf("unknown run: %v", err)
	}
}

func TestHeldRunSupersededByNewerVersion(t *testing.T) {
	t.Parallel()
	w := newApprovalWF(t)
	id, prod := w.toProd(t, "app/web", 1)
	acc, err := w.st.EventAccept(t.Context(), store.EventAcceptParams{
		EventSubmission: converge.EventSubmission{Kind: "deploy", Resource: "prod/app/web", Version: 2, Payload: json.RawMessage(`{}`)},
		MaxAttempts:     1,
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(acc.SupersededRuns, prod) || acc.Run.Status != converge.RunQueued {
		t.Fatalf("accept: superseded %v, run %s", acc.SupersededRuns, acc.Run.Status)
	}
	if st, _, _, attempts := w.heldState(t, prod); st != converge.RunSuperseded || attempts != 0 {
		t.Fatalf("held run: %s, %d attempts", st, attempts)
	}
	wantStatuses(t, w.statuses(t, id), "superseded(final) build=succeeded canary=succeeded staging=succeeded prod=superseded")
	_, err = w.st.RunApprove(t.Context(), prod, converge.AuditEntry{Actor: "op", Role: "operator"})
	wantCode(t, err, converge.ENOTHELD)
}

func TestConcurrentApprovals(t *testing.T) {
	t.Parallel()
	w := newApprovalWF(t)
	_, prod := w.toProd(t, "app/web", 1)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = w.st.RunApprove(t.Context(), prod, converge.AuditEntry{Actor: "op", Role: "operator"})
		}()
	}
	wg.Wait()
	ok := 0
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case converge.ErrorCode(err) != converge.ENOTHELD:
			t.Fatalf("approve: %v", err)
		}
	}
	if ok != 1 {
		t.Fatalf("%d approvals succeeded, want 1 (%v)", ok, errs)
	}
	if n := w.audits(t, "run.approve"); n != 1 {
		t.Fatalf("%d run.approve entries, want 1", n)
	}
	var jobs int
	if err := w.pool.QueryRow(t.Context(), `SELECT count(*) FROM river_job WHERE args->>'run_id' = $1`, prod.String()).Scan(&jobs); err != nil {
		t.Fatal(err)
	}
	if jobs != 1 {
		t.Fatalf("%d jobs for the approved run, want 1", jobs)
	}
}

func TestApproveRacesSupersession(t *testing.T) {
	t.Parallel()
	for i := range 5 {
		w := newApprovalWF(t)
		_, prod := w.toProd(t, "app/web", 1)
		var wg sync.WaitGroup
		var approveErr, acceptErr error
		wg.Add(2)
		go func() {
			defer wg.Done()
			_, approveErr = w.st.RunApprove(t.Context(), prod, converge.AuditEntry{Actor: "op", Role: "operator"})
		}()
		go func() {
			defer wg.Done()
			_, acceptErr = w.st.EventAccept(t.Context(), store.EventAcceptParams{
				EventSubmission: converge.EventSubmission{Kind: "deploy", Resource: "prod/app/web", Version: 2, Payload: json.RawMessage(`{}`)},
				MaxAttempts:     1,
			})
		}()
		wg.Wait()
		if acceptErr != nil {
			t.Fatalf("round %d: accept: %v", i, acceptErr)
		}
		if approveErr != nil && converge.ErrorCode(approveErr) != converge.ENOTHELD {
			t.Fatalf("round %d: approve: %v", i, approveErr)
		}
		st, _, _, attempts := w.heldState(t, prod)
		if st != converge.RunSuperseded || attempts != 0 {
			t.Fatalf("round %d: old run %s with %d attempts, want superseded without attempts", i, st, attempts)
		}
		want := 0
		if approveErr == nil {
			want = 1
		}
		if n := w.audits(t, "run.approve"); n != want {
			t.Fatalf("round %d: %d run.approve entries, want %d (approve: %v)", i, n, want, approveErr)
		}
		var active int
		if err := w.pool.QueryRow(t.Context(), `SELECT count(*) FROM converge_runs WHERE kind = 'deploy' AND resource = 'prod/app/web'
			AND status IN ('queued', 'held', 'running', 'retrying')`).Scan(&active); err != nil {
			t.Fatal(err)
		}
		if active != 1 {
			t.Fatalf("round %d: %d unfinished runs on the stream, want 1", i, active)
		}
	}
}

// failOrSucceed accepts version v of build/app/web (quarantine after
// three failures) and, unless it is held, runs its one attempt to a
// permanent failure or a success. It returns the accepted run.
func (w *wf) failOrSucceed(t *testing.T, v int64, fail bool) *converge.Run {
	t.Helper()
	ctx := t.Context()
	acc, err := w.st.EventAccept(ctx, store.EventAcceptParams{
		EventSubmission: converge.EventSubmission{Kind: "build", Resource: "app/web", Version: v, Payload: json.RawMessage(`{}`)},
		MaxAttempts:     1, QuarantineAfter: 3,
	})
	if err != nil {
		t.Fatal(err)
	}
	if acc.Run.Status == converge.RunHeld {
		return acc.Run
	}
	w.attempt(t, acc.Run.ID, fail)
	return acc.Run
}

// attempt begins run id's attempt and finishes it failed or succeeded.
func (w *wf) attempt(t *testing.T, id uuid.UUID, fail bool) {
	t.Helper()
	ctx := t.Context()
	var job int64
	if err := w.pool.QueryRow(ctx, `SELECT job_id FROM converge_runs WHERE id = $1`, id).Scan(&job); err != nil {
		t.Fatal(err)
	}
	tk, err := w.st.AttemptBegin(ctx, id, job, time.Minute)
	if err != nil || tk.Decision != converge.DecisionCall {
		t.Fatalf("begin: %v %+v", err, tk)
	}
	var e *converge.Error
	if fail {
		e = &converge.Error{Class: converge.ClassPermanent, Message: "broken"}
	}
	if _, err := w.st.AttemptFinish(ctx, store.AttemptFinishParams{Run: tk.Run, Attempt: tk.Attempt, Started: time.Now(), Err: e}); err != nil {
		t.Fatal(err)
	}
}

func (w *wf) quarantined(t *testing.T) bool {
	t.Helper()
	s, err := w.st.StreamGet(t.Context(), "build", "app/web")
	if err != nil {
		t.Fatal(err)
	}
	if s.Quarantined != (s.QuarantinedAt != nil) {
		t.Fatalf("stream: quarantined %v at %v", s.Quarantined, s.QuarantinedAt)
	}
	return s.Quarantined
}

func TestQuarantineTripsAfterExactlyN(t *testing.T) {
	t.Parallel()
	w := newWF(t)
	// Two failures, a success, two failures: never three in a row.
	for v, fail := range []bool{true, true, false, true, true} {
		w.failOrSucceed(t, int64(v+1), fail)
		if w.quarantined(t) {
			t.Fatalf("quarantined after version %d", v+1)
		}
	}
	// A superseded run neither counts nor breaks the streak.
	if _, err := w.st.EventAccept(t.Context(), store.EventAcceptParams{
		EventSubmission: converge.EventSubmission{Kind: "build", Resource: "app/web", Version: 6, Payload: json.RawMessage(`{}`)},
		MaxAttempts:     1, QuarantineAfter: 3,
	}); err != nil {
		t.Fatal(err)
	}
	w.failOrSucceed(t, 7, true) // supersedes 6; the third failure in a row
	if !w.quarantined(t) {
		t.Fatal("not quarantined after the third failure in a row")
	}

	// New runs are held; each newer one supersedes the older held run.
	held8 := w.failOrSucceed(t, 8, true)
	held9 := w.failOrSucceed(t, 9, true)
	if held8.Status != converge.RunHeld || !slices.Equal(held9.Hold, []string{"quarantine"}) {
		t.Fatalf("runs of a quarantined stream: %s %v", held8.Status, held9.Hold)
	}
	if st, _, job, _ := w.heldState(t, held8.ID); st != converge.RunSuperseded || job != nil {
		t.Fatalf("older held run: %s job %v", st, job)
	}
	qs, err := w.st.QuarantineList(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(qs) != 1 || qs[0].FailedRuns != 3 || qs[0].HeldRunID == nil || *qs[0].HeldRunID != held9.ID {
		t.Fatalf("quarantine list: %+v", qs)
	}

	res, err := w.st.QuarantineRelease(t.Context(), "build", "app/web", converge.AuditEntry{Actor: "op", Role: "operator"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Run == nil || res.Run.ID != held9.ID || res.Run.Status != converge.RunQueued {
		t.Fatalf("release: %+v", res)
	}
	if w.quarantined(t) {
		t.Fatal("still quarantined after the release")
	}
	_, err = w.st.QuarantineRelease(t.Context(), "build", "app/web", converge.AuditEntry{Actor: "op", Role: "operator"})
	wantCode(t, err, converge.ENOTQUARANTINED)
	// A stream that does not exist is not quarantined either.
	_, err = w.st.QuarantineRelease(t.Context(), "build", "never/seen", converge.AuditEntry{Actor: "op", Role: "operator"})
	wantCode(t, err, converge.ENOTQUARANTINED)
	if !strings.Contains(err.Error(), "the stream build/never/seen is not quarantined") {
		t.Errorf("release of a stream that does not exist: %v, want it named", err)
	}
	if n := w.audits(t, "quarantine.release"); n != 1 {
		t.Fatalf("%d quarantine.release entries, want 1", n)
	}
	// The released run succeeds: the streak is reset.
	w.attempt(t, held9.ID, false)
	var streak int
	if err := w.pool.QueryRow(t.Context(), `SELECT failed_streak FROM converge_streams WHERE kind = 'build' AND resource = 'app/web'`).Scan(&streak); err != nil {
		t.Fatal(err)
	}
	if streak != 0 || w.quarantined(t) {
		t.Fatalf("after a success: streak %d, quarantined %v", streak, w.quarantined(t))
	}
}

func TestQuarantineAcceptMany(t *testing.T) {
	t.Parallel()
	w := newWF(t)
	for v := range 3 {
		w.failOrSucceed(t, int64(v+1), true)
	}
	if !w.quarantined(t) {
		t.Fatal("not quarantined")
	}
	res, errs, err := w.st.EventAcceptMany(t.Context(), []store.EventAcceptParams{
		{EventSubmission: converge.EventSubmission{Kind: "build", Resource: "app/web", Version: 4, Payload: json.RawMessage(`{}`)}, MaxAttempts: 1},
		{EventSubmission: converge.EventSubmission{Kind: "build", Resource: "app/api", Version: 1, Payload: json.RawMessage(`{}`)}, MaxAttempts: 1},
	})
	if err != nil || errs[0] != nil || errs[1] != nil {
		t.Fatalf("accept many: %v %v", err, errs)
	}
	if res[0].Run.Status != converge.RunHeld || res[0].Event.Status != converge.RunHeld || res[1].Run.Status != converge.RunQueued {
		t.Fatalf("statuses: %s %s %s", res[0].Run.Status, res[0].Event.Status, res[1].Run.Status)
	}
	if _, _, job, _ := w.heldState(t, res[0].Run.ID); job != nil {
		t.Fatal("held run has a job")
	}
	if _, _, job, _ := w.heldState(t, res[1].Run.ID); job == nil {
		t.Fatal("queued run has no job")
	}
	_, _, err = w.st.EventAcceptMany(t.Context(), []store.EventAcceptParams{
		{EventSubmission: converge.EventSubmission{Kind: "build", Resource: "app/x", Version: 1, Payload: json.RawMessage(`{}`)}, MaxAttempts: 1,
			Hold: []string{converge.HoldApproval}},
	})
	if err == nil {
		t.Fatal("EventAcceptMany accepted a Hold")
	}
}

func TestRedriveOfQuarantinedStreamIsHeld(t *testing.T) {
	t.Parallel()
	w := newWF(t)
	var last *converge.Run
	for v := range 3 {
		last = w.failOrSucceed(t, int64(v+1), true)
	}
	if !w.quarantined(t) {
		t.Fatal("not quarantined")
	}
	var dl uuid.UUID
	if err := w.pool.QueryRow(t.Context(), `SELECT id FROM converge_dead_letters WHERE run_id = $1`, last.ID).Scan(&dl); err != nil {
		t.Fatal(err)
	}
	run, err := w.st.DeadLetterRedrive(t.Context(), store.DeadLetterRedriveParams{ID: dl,
		Kinds: converge.KindPolicies{"build": {Name: "build", MaxAttempts: 1, QuarantineAfter: 3}}, Audit: converge.AuditEntry{Actor: "op", Role: "operator"}})
	if err != nil {
		t.Fatal(err)
	}
	if run.Status != converge.RunHeld || !slices.Equal(run.Hold, []string{"quarantine"}) {
		t.Fatalf("redrive of a quarantined stream: %s %v", run.Status, run.Hold)
	}
	if _, _, job, _ := w.heldState(t, run.ID); job != nil {
		t.Fatal("held redrive has a job")
	}
	res, err := w.st.QuarantineRelease(t.Context(), "build", "app/web", converge.AuditEntry{Actor: "op", Role: "operator"})
	if err != nil || res.Run == nil || res.Run.ID != run.ID {
		t.Fatalf("release: %+v %v", res, err)
	}
	// It fails again: the streak (4) is past quarantine_after at once.
	w.attempt(t, run.ID, true)
	if !w.quarantined(t) {
		t.Fatal("a failure after a release did not quarantine the stream again")
	}
}
