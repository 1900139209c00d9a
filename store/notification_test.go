package store_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/store"
	"github.com/converge-run/converge/test/pgtest"
)

// notifyStore is a store whose one receiver wants every notification
// type, and a second store on the same database without receivers.
func notifyStore(t *testing.T) (with, without *store.Store, jobs func() map[string]int) {
	t.Helper()
	pool := pgtest.OpenPool(t, pgtest.NewDatabase(t), 4)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		t.Fatal(err)
	}
	with, without = store.New(pool, client), store.New(pool, client)
	key := converge.NotifyReceiverKey("http://127.0.0.1:1/notify", "standard", 0)
	with.NotifyRoutesSet([]converge.NotifyRoute{{Key: key, Shown: "http://127.0.0.1:1", On: converge.NotificationTypes, MaxAttempts: 4}})
	jobs = func() map[string]int {
		t.Helper()
		rows, err := pool.Query(t.Context(), `SELECT args->>'type', queue, max_attempts FROM river_job WHERE kind = 'converge_notification'`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		out := map[string]int{}
		for rows.Next() {
			var typ, queue string
			var maxAttempts int
			if err := rows.Scan(&typ, &queue, &maxAttempts); err != nil {
				t.Fatal(err)
			}
			if queue != converge.NotificationQueue(key) || maxAttempts != 4 {
				t.Errorf("%s notification in queue %q with %d attempts, want %q and the route's 4", typ, queue, maxAttempts, converge.NotificationQueue(key))
			}
			out[typ]++
		}
		return out
	}
	return with, without, jobs
}

func notifyAccept(t *testing.T, st *store.Store, resource string, version int64) *converge.Run {
	t.Helper()
	res, err := st.EventAccept(t.Context(), store.EventAcceptParams{
		EventSubmission: converge.EventSubmission{Kind: "build", Resource: resource, Version: version, Payload: json.RawMessage(`{}`)},
		MaxAttempts:     1, QuarantineAfter: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	return res.Run
}

// jobOf is the River job of run id.
func jobOf(t *testing.T, st *store.Store, id uuid.UUID) int64 {
	t.Helper()
	var job int64
	if err := st.Pool().QueryRow(t.Context(), `SELECT job_id FROM converge_runs WHERE id = $1`, id).Scan(&job); err != nil {
		t.Fatal(err)
	}
	return job
}

// TestNotificationsEnqueued: a run failing on the many-finish path
// enqueues its dead letter's and its stream's quarantine notification in
// that transaction; a run failing because its last attempt was abandoned
// (begin) enqueues its dead letter's; a run accepted held on the many-accept
// path enqueues run.held; a store without receivers enqueues nothing; and
// each subject is current until it moves on.
func TestNotificationsEnqueued(t *testing.T) {
	t.Parallel()
	st, plain, jobs := notifyStore(t)
	ctx := t.Context()

	// Without receivers: the same failure, nothing enqueued.
	r0 := notifyAccept(t, plain, "app/plain", 1)
	if _, err := plain.AttemptBegin(ctx, r0.ID, jobOf(t, plain, r0.ID), time.Minute); err != nil {
		t.Fatal(err)
	}
	perm := &converge.Error{Class: converge.ClassPermanent, Message: "invalid build definition"}
	if _, err := plain.AttemptFinish(ctx, store.AttemptFinishParams{Run: r0, Attempt: 1, Started: time.Now(), Err: perm}); err != nil {
		t.Fatal(err)
	}
	if got := jobs(); len(got) != 0 {
		t.Fatalf("a store without receivers enqueued %v", got)
	}

	// Many-finish path: a permanent failure of the stream's only allowed
	// attempt quarantines it (quarantine_after 1).
	r1 := notifyAccept(t, st, "app/many", 1)
	if _, err := st.AttemptBegin(ctx, r1.ID, jobOf(t, st, r1.ID), time.Minute); err != nil {
		t.Fatal(err)
	}
	res, err := st.AttemptFinishMany(ctx, []store.AttemptFinishParams{{Run: r1, Attempt: 1, Started: time.Now(), Err: perm}})
	if err != nil || res[0].Status != converge.RunFailed {
		t.Fatalf("finish: %v %+v", err, res)
	}
	if got := jobs(); got[converge.NotifyDeadLetterCreated] != 1 || got[converge.NotifyStreamQuarantined] != 1 || len(got) != 2 {
		t.Fatalf("after the failure: %v, want one dead_letter.created and one stream.quarantined", got)
	}

	// Many-accept path: the quarantined stream's next version is held.
	acc, errs, err := st.EventAcceptMany(ctx, []store.EventAcceptParams{{
		EventSubmission: converge.EventSubmission{Kind: "build", Resource: "app/many", Version: 2, Payload: json.RawMessage(`{}`)},
		MaxAttempts:     1, QuarantineAfter: 1,
	}})
	if err != nil || errs[0] != nil || acc[0].Run.Status != converge.RunHeld {
		t.Fatalf("accept into the quarantined stream: %v %v %+v", err, errs[0], acc[0])
	}
	if got := jobs(); got[converge.NotifyRunHeld] != 1 {
		t.Fatalf("after the held accept: %v, want one run.held", got)
	}

	// Begin path: the worker vanished during the last attempt.
	r2 := notifyAccept(t, st, "app/abandoned", 1)
	job := jobOf(t, st, r2.ID)
	if _, err := st.AttemptBegin(ctx, r2.ID, job, time.Minute); err != nil {
		t.Fatal(err)
	}
	// The worker is gone: its lease runs out.
	if _, err := st.Pool().Exec(ctx, `UPDATE converge_streams SET lease_expires_at = now() - interval '1 second'
		WHERE kind = 'build' AND resource = 'app/abandoned'`); err != nil {
		t.Fatal(err)
	}
	if _, err := st.AttemptBegin(ctx, r2.ID, job, time.Minute); err != nil {
		t.Fatal(err)
	}
	if got := jobs(); got[converge.NotifyDeadLetterCreated] != 2 || got[converge.NotifyStreamQuarantined] != 2 {
		t.Fatalf("after the abandoned last attempt: %v, want a second dead_letter.created and stream.quarantined", got)
	}

	// Each subject is current until it moves on.
	var args []converge.NotificationArgs
	rows, err := st.Pool().Query(ctx, `SELECT args FROM river_job WHERE kind = 'converge_notification' ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var b []byte
		var a converge.NotificationArgs
		if err := rows.Scan(&b); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &a); err != nil {
			t.Fatal(err)
		}
		args = append(args, a)
	}
	rows.Close()
	for _, a := range args {
		ok, err := st.NotificationCurrent(ctx, a)
		if err != nil || !ok {
			t.Errorf("%s about %s %s: current = %v, %v; want true", a.Type, a.Subject.Kind, a.Subject.Resource, ok, err)
		}
		if a.Subject.Kind != "build" || a.Subject.Resource == "" || a.Subject.Version < 1 || a.At.IsZero() || a.ID == uuid.Nil {
			t.Errorf("notification %+v: want its stream, version, time and id", a)
		}
	}
	// The held run superseded, the dead letter discarded: both obsolete.
	if _, err := st.EventAccept(ctx, store.EventAcceptParams{
		EventSubmission: converge.EventSubmission{Kind: "build", Resource: "app/many", Version: 3, Payload: json.RawMessage(`{}`)},
		MaxAttempts:     1, QuarantineAfter: 1,
	}); err != nil {
		t.Fatal(err)
	}
	for _, a := range args {
		if a.Type == converge.NotifyDeadLetterCreated && a.Subject.Resource == "app/many" {
			if _, err := st.DeadLetterDiscard(ctx, a.Subject.ID, converge.AuditEntry{Actor: "oncall", Role: "operator"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, a := range args {
		ok, err := st.NotificationCurrent(ctx, a)
		if err != nil {
			t.Fatal(err)
		}
		wantCurrent := a.Subject.Resource == "app/abandoned" || a.Type == converge.NotifyStreamQuarantined
		if ok != wantCurrent {
			t.Errorf("%s about %s: current = %v, want %v", a.Type, a.Subject.Resource, ok, wantCurrent)
		}
	}
}

// TestNotificationWorkflowRunFailedOnce: workflow_run.failed is notified
// once per workflow run, when a step first fails (SPEC §10): not again when
// its redriven run fails too, nor when another step fails after the
// redrive put the workflow run back to running; a second workflow run gets
// its own.
func TestNotificationWorkflowRunFailedOnce(t *testing.T) {
	t.Parallel()
	w := newWF(t)
	ctx := t.Context()
	key := converge.NotifyReceiverKey("http://127.0.0.1:1/notify", "standard", 0)
	w.st.NotifyRoutesSet([]converge.NotifyRoute{{Key: key, Shown: "http://127.0.0.1:1", On: converge.NotificationTypes, MaxAttempts: 4}})
	failedNotified := func() map[string]int {
		t.Helper()
		rows, err := w.pool.Query(ctx, `SELECT args->'subject'->>'resource', args->'subject'->>'step' FROM river_job
			WHERE kind = 'converge_notification' AND args->>'type' = $1`, converge.NotifyWorkflowRunFailed)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		out := map[string]int{}
		for rows.Next() {
			var res, step string
			if err := rows.Scan(&res, &step); err != nil {
				t.Fatal(err)
			}
			// Each counts under its resource and the name of the step
			// that failed first (not its kind, deploy).
			out[res+" "+step]++
		}
		return out
	}

	res, err := w.start(t, "app", 1, `{}`)
	if err != nil {
		t.Fatal(err)
	}
	id := res.WorkflowRun.ID
	w.run(t, id, "build", "", nil)
	w.run(t, id, "staging", "", permanent)
	if got := failedNotified(); got["app staging"] != 1 || len(got) != 1 {
		t.Fatalf("after staging failed: workflow_run.failed %v, want one for app naming staging", got)
	}
	// The redriven step fails again: the workflow run is failed again, not
	// notified again.
	w.redrive(t, id, "staging")
	wantStatuses(t, w.statuses(t, id), "running build=succeeded canary=queued staging=queued prod=pending")
	w.run(t, id, "staging", "", permanent)
	wantStatuses(t, w.statuses(t, id), "failed build=succeeded canary=queued staging=failed prod=pending")
	// Redriven once more, and then its sibling fails.
	w.redrive(t, id, "staging")
	w.run(t, id, "canary", "", permanent)
	wantStatuses(t, w.statuses(t, id), "failed build=succeeded canary=failed staging=queued prod=pending")
	if got := failedNotified(); got["app staging"] != 1 || len(got) != 1 {
		t.Fatalf("after two more failures: workflow_run.failed %v, want still one for app naming staging", got)
	}

	// Another workflow run is notified on its own.
	res, err = w.start(t, "other", 1, `{}`)
	if err != nil {
		t.Fatal(err)
	}
	w.run(t, res.WorkflowRun.ID, "build", "", nil)
	w.run(t, res.WorkflowRun.ID, "canary", "", permanent)
	if got := failedNotified(); got["app staging"] != 1 || got["other canary"] != 1 || len(got) != 2 {
		t.Fatalf("workflow_run.failed %v, want one for app naming staging and one for other naming canary", got)
	}
}

// TestNotificationErrorIsTheLast: a dead_letter.created notification's
// error is the failure's message, the dead letter's last error, not the
// search text that also lists the run's earlier errors (one per line,
// which the slack format put on its one line).
func TestNotificationErrorIsTheLast(t *testing.T) {
	t.Parallel()
	st, _, _ := notifyStore(t)
	ctx := t.Context()

	res, err := st.EventAccept(ctx, store.EventAcceptParams{
		EventSubmission: converge.EventSubmission{Kind: "build", Resource: "app/two-errors", Version: 1, Payload: json.RawMessage(`{}`)},
		MaxAttempts:     2,
	})
	if err != nil {
		t.Fatal(err)
	}
	run := res.Run
	errs := []*converge.Error{
		{Class: converge.ClassTransient, Message: "POST http://127.0.0.1:1/build: connection refused"},
		{Class: converge.ClassPermanent, Message: "POST http://127.0.0.1:1/build: 422 Unprocessable Entity"},
	}
	for i, e := range errs {
		if _, err := st.AttemptBegin(ctx, run.ID, jobOf(t, st, run.ID), time.Minute); err != nil {
			t.Fatal(err)
		}
		fin, err := st.AttemptFinish(ctx, store.AttemptFinishParams{Run: run, Attempt: i + 1, Started: time.Now(), Err: e,
			Backoff: converge.Backoff{Initial: time.Millisecond, Max: time.Millisecond}})
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			// Due at once for the second attempt.
			if _, err := st.Pool().Exec(ctx, `UPDATE converge_runs SET next_attempt_at = now() WHERE id = $1`, run.ID); err != nil {
				t.Fatal(err)
			}
		} else if fin.Status != converge.RunFailed {
			t.Fatalf("after the permanent error: %s, want failed", fin.Status)
		}
	}

	var b []byte
	if err := st.Pool().QueryRow(ctx, `SELECT args FROM river_job WHERE kind = 'converge_notification'
		AND args->>'type' = $1 AND args->'subject'->>'resource' = 'app/two-errors'`, converge.NotifyDeadLetterCreated).Scan(&b); err != nil {
		t.Fatal(err)
	}
	var a converge.NotificationArgs
	if err := json.Unmarshal(b, &a); err != nil {
		t.Fatal(err)
	}
	if a.Subject.Error != errs[1].Message {
		t.Errorf("dead_letter.created error = %q, want the last error %q", a.Subject.Error, errs[1].Message)
	}
}
