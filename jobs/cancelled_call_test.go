package jobs_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/jobs"
	"github.com/converge-run/converge/store"
	"github.com/converge-run/converge/target"
	"github.com/converge-run/converge/test/testkit"
)

// TestSupersededCallCancelled: a running attempt whose run a newer version
// supersedes has its call cancelled (the target sees its request end), is
// recorded cancelled, and its error says why in converge's words, not the
// transport's or River's ("context canceled: JobCancelError"); the newer
// version is then called.
func TestSupersededCallCancelled(t *testing.T) {
	t.Parallel()
	cancelled := make(chan struct{}, 1)
	f := newFakeTarget(t, func(n int, w http.ResponseWriter, r *http.Request) {
		if n == 1 {
			<-r.Context().Done() // held until converge lets go
			cancelled <- struct{}{}
			return
		}
		answer(w, 200, `{}`)
	})
	tg, err := target.NewHTTP(target.HTTPConfig{URL: f.srv.URL + "/deploy", Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	st := startWorkers(t, map[string]*jobs.Kind{"deploy": {KindPolicy: converge.KindPolicy{Name: "deploy", Timeout: 30 * time.Second,
		MaxAttempts: 3, Backoff: testBackoff, Concurrency: 2}, Target: tg}})
	accept := func(v int64) *converge.EventAcceptResult {
		t.Helper()
		res, err := st.EventAccept(t.Context(), store.EventAcceptParams{
			EventSubmission: converge.EventSubmission{Kind: "deploy", Resource: "app/web", Version: v, Payload: json.RawMessage(`{}`)},
			MaxAttempts:     3,
		})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	first := accept(1)
	testkit.Eventually(t, 10*time.Second, func() (bool, string) {
		return len(f.received()) == 1, "the target has not been called yet"
	})
	accept(2)
	select {
	case <-cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("the superseded call was not cancelled")
	}
	run := waitTerminal(t, st, first.Event.ID, 10*time.Second)
	if run.Status != converge.RunSuperseded || len(run.AttemptHistory) != 1 {
		t.Fatalf("run 1: %s with %d attempts, want superseded with 1", run.Status, len(run.AttemptHistory))
	}
	a := run.AttemptHistory[0]
	testkit.Eventually(t, 10*time.Second, func() (bool, string) {
		ev, err := st.EventGet(t.Context(), first.Event.ID)
		if err != nil {
			t.Fatal(err)
		}
		a = ev.Runs[0].AttemptHistory[0]
		return a.Outcome != "", "the superseded attempt has no outcome yet"
	})
	if a.Outcome != converge.OutcomeCancelled || a.Error == nil ||
		!strings.HasPrefix(a.Error.Message, "the call was cancelled: its run was superseded or cancelled") ||
		strings.Contains(a.Error.Message, "JobCancelError") {
		t.Errorf("the superseded attempt: %s, error %+v; want cancelled, saying why in converge's words", a.Outcome, a.Error)
	}
	testkit.Eventually(t, 10*time.Second, func() (bool, string) {
		return len(f.received()) == 2, "the newer version has not been called"
	})
}
