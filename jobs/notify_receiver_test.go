package jobs_test

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/jobs"
	"github.com/converge-run/converge/store"
	"github.com/converge-run/converge/telemetry"
	"github.com/converge-run/converge/test/pgtest"
	"github.com/converge-run/converge/test/testkit"
)

// TestNotificationReceiverKey: a notification job names its receiver by
// a key of the receiver's URL and format, not by its position: with the
// receivers reordered between the insert and the work, each notification
// still goes to the receiver it was enqueued for; one whose receiver was
// removed meanwhile is dropped at the worker's start (cancelled, counted
// failed) and sent to nobody.
func TestNotificationReceiverKey(t *testing.T) {
	t.Parallel()
	ok := func(_ int, w http.ResponseWriter, _ *http.Request) { answer(w, http.StatusOK, `{}`) }
	held, dead, gone := newFakeTarget(t, ok), newFakeTarget(t, ok), newFakeTarget(t, ok)
	receiver := func(f *fakeTarget, typ string) jobs.NotifyReceiver {
		return jobs.NotifyReceiver{URL: f.srv.URL + "/notify", Format: jobs.NotifyFormatStandard, On: []string{typ},
			MaxAttempts: 3, Backoff: testBackoff, Timeout: 5 * time.Second}
	}
	toDead := receiver(dead, converge.NotifyDeadLetterCreated)
	toHeld := receiver(held, converge.NotifyRunHeld)
	toGone := receiver(gone, converge.NotifyStreamQuarantined)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	pool := pgtest.OpenPool(t, pgtest.NewDatabase(t), 8)

	// An API process, receivers in one order, enqueues: a run failing
	// (dead letter, quarantined stream), then a version accepted held.
	api, err := jobs.NewService(pool, jobs.Config{Notify: []jobs.NotifyReceiver{toDead, toHeld, toGone}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	st := api.Store()
	ctx := t.Context()
	accept := func(version int64) *converge.EventAcceptResult {
		t.Helper()
		res, err := st.EventAccept(ctx, store.EventAcceptParams{
			EventSubmission: converge.EventSubmission{Kind: "build", Resource: "app/keyed", Version: version, Payload: json.RawMessage(`{}`)},
			MaxAttempts:     1, QuarantineAfter: 1,
		})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	first := accept(1).Run
	job := runJobID(t, pool, first.ID)
	if _, err := st.AttemptBegin(ctx, first.ID, job, time.Minute); err != nil {
		t.Fatal(err)
	}
	perm := &converge.Error{Class: converge.ClassPermanent, Message: "invalid build definition"}
	if _, err := st.AttemptFinish(ctx, store.AttemptFinishParams{Run: first, Attempt: 1, Started: time.Now(), Err: perm}); err != nil {
		t.Fatal(err)
	}
	heldRun := accept(2).Run
	if heldRun.Status != converge.RunHeld {
		t.Fatalf("version 2 of the quarantined stream is %s, want held", heldRun.Status)
	}
	var queued int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'converge_notification'`).Scan(&queued); err != nil || queued != 3 {
		t.Fatalf("%d notifications queued (%v), want 3", queued, err)
	}

	// A worker whose configuration lists the receivers the other way
	// round and no longer has the third.
	reg := prometheus.NewRegistry()
	startService(t, pool, jobs.Config{Notify: []jobs.NotifyReceiver{toHeld, toDead}, Logger: quiet,
		Metrics: telemetry.NewMetrics(reg, telemetry.Labels{})})

	typesOf := func(f *fakeTarget) []string {
		var out []string
		for _, c := range f.received() {
			out = append(out, fmt.Sprint(c.body["type"]))
		}
		return out
	}
	testkit.Eventually(t, 20*time.Second, func() (bool, string) {
		return len(dead.received()) > 0 && len(held.received()) > 0,
			fmt.Sprintf("dead-letter receiver got %v, held-run receiver got %v", typesOf(dead), typesOf(held))
	})
	var state string
	testkit.Eventually(t, 10*time.Second, func() (bool, string) {
		if err := pool.QueryRow(ctx, `SELECT state FROM river_job WHERE kind = 'converge_notification'
			AND args->>'type' = $1`, converge.NotifyStreamQuarantined).Scan(&state); err != nil {
			t.Fatal(err)
		}
		return state == "cancelled", "the removed receiver's notification is " + state + ", want cancelled"
	})
	if got := typesOf(dead); len(got) != 1 || got[0] != converge.NotifyDeadLetterCreated {
		t.Errorf("the dead-letter receiver got %v, want only its dead_letter.created", got)
	}
	if got := typesOf(held); len(got) != 1 || got[0] != converge.NotifyRunHeld {
		t.Errorf("the held-run receiver got %v, want only its run.held", got)
	}
	if c := held.received(); len(c) == 1 && c[0].body["data"].(map[string]any)["id"] != heldRun.ID.String() {
		t.Errorf("run.held about %v, want the held run %s", c[0].body["data"], heldRun.ID)
	}
	if got := gone.received(); len(got) != 0 {
		t.Errorf("the removed receiver got %d notifications", len(got))
	}
	if failed := counterValue(t, reg, "converge_notifications_total", "failed"); failed != 1 {
		t.Errorf(`converge_notifications_total{outcome="failed"} = %v, want 1 (the dropped one)`, failed)
	}
}

// counterValue is the value of the counter name with outcome in reg.
func counterValue(t *testing.T, reg *prometheus.Registry, name, outcome string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" && l.GetValue() == outcome {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
