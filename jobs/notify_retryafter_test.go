package jobs_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/jobs"
	"github.com/converge-run/converge/store"
	"github.com/converge-run/converge/test/pgtest"
	"github.com/converge-run/converge/test/testkit"
)

// TestNotificationRetryAfter: a receiver that answers a notification 429
// with Retry-After (a chat webhook limiting its callers) gets the next
// attempt no sooner than it asked, not at the backoff's first delay (100 ms
// here), as a target's Retry-After is honoured (SPEC §5, §6).
func TestNotificationRetryAfter(t *testing.T) {
	t.Parallel()
	limited := newFakeTarget(t, func(n int, w http.ResponseWriter, _ *http.Request) {
		if n == 1 {
			answer(w, http.StatusTooManyRequests, `{"ok":false}`, "Retry-After", "1")
			return
		}
		answer(w, http.StatusOK, `{}`)
	})
	receiver := jobs.NotifyReceiver{URL: limited.srv.URL + "/notify", Format: jobs.NotifyFormatStandard,
		On: []string{converge.NotifyDeadLetterCreated}, MaxAttempts: 3, Backoff: testBackoff, Timeout: 5 * time.Second}
	pool := pgtest.OpenPool(t, pgtest.NewDatabase(t), 8)
	ctx := t.Context()
	svc := startService(t, pool, jobs.Config{Notify: []jobs.NotifyReceiver{receiver}})
	st := svc.Store()

	// A run failing for good: a dead letter, notified.
	res, err := st.EventAccept(ctx, store.EventAcceptParams{
		EventSubmission: converge.EventSubmission{Kind: "build", Resource: "app/limited", Version: 1, Payload: json.RawMessage(`{}`)},
		MaxAttempts:     1,
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.AttemptBegin(ctx, res.Run.ID, runJobID(t, pool, res.Run.ID), time.Minute); err != nil {
		t.Fatal(err)
	}
	perm := &converge.Error{Class: converge.ClassPermanent, Message: "invalid build definition"}
	if _, err := st.AttemptFinish(ctx, store.AttemptFinishParams{Run: res.Run, Attempt: 1, Started: time.Now(), Err: perm}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 20*time.Second, func() (bool, string) {
		return len(limited.received()) >= 2, "the receiver has not been called twice"
	})
	calls := limited.received()
	if gap := calls[1].at.Sub(calls[0].at); gap < time.Second {
		t.Errorf("second attempt %s after the 429 with Retry-After: 1, want at least 1s", gap)
	}
}
