package jobs_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/jobs"
	"github.com/converge-run/converge/store"
	"github.com/converge-run/converge/target"
	"github.com/converge-run/converge/test/pgtest"
	"github.com/converge-run/converge/test/testkit"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// call is one request a fake target received.
type call struct {
	at     time.Time
	header http.Header
	body   map[string]any
}

// fakeTarget is an HTTP target inside the test that answers its n-th call
// (from 1) with respond.
type fakeTarget struct {
	srv     *httptest.Server
	respond func(n int, w http.ResponseWriter, r *http.Request)

	mu    sync.Mutex
	calls []call
}

func newFakeTarget(t *testing.T, respond func(n int, w http.ResponseWriter, r *http.Request)) *fakeTarget {
	t.Helper()
	f := &fakeTarget{respond: respond}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := call{at: time.Now(), header: r.Header.Clone()}
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &c.body); err != nil {
			t.Errorf("target got a body that is not JSON: %v: %s", err, b)
		}
		f.mu.Lock()
		f.calls = append(f.calls, c)
		n := len(f.calls)
		f.mu.Unlock()
		f.respond(n, w, r)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

// received returns the calls so far.
func (f *fakeTarget) received() []call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]call(nil), f.calls...)
}

// answer writes status with headers and body.
func answer(w http.ResponseWriter, status int, body string, headers ...string) {
	for i := 0; i+1 < len(headers); i += 2 {
		w.Header().Set(headers[i], headers[i+1])
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body)
}

// retryAfterOnce answers the first call with status, body and a
// Retry-After header, and every later call 200.
func retryAfterOnce(status int, body, retryAfter string) func(int, http.ResponseWriter, *http.Request) {
	return func(n int, w http.ResponseWriter, _ *http.Request) {
		if n == 1 {
			answer(w, status, body, "Retry-After", retryAfter)
			return
		}
		answer(w, 200, `{}`)
	}
}

// refusedURL returns a loopback URL on which nothing listens.
func refusedURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return "http://" + addr + "/build"
}

// startWorkers runs a River client with workers for kinds on a database of
// the test's own, and returns the store to submit events with.
func startWorkers(t *testing.T, kinds map[string]*jobs.Kind) *store.Store {
	t.Helper()
	pool := pgtest.OpenPool(t, pgtest.NewDatabase(t), 8)
	svc, err := jobs.NewService(pool, jobs.Config{
		Kinds: kinds, Work: true, RescueAfter: 2 * time.Second,
		FetchCooldown: 5 * time.Millisecond, FetchPollInterval: 20 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatalf("river client: %v", err)
	}
	st, client := svc.Store(), svc.Client()
	if err := client.Start(context.Background()); err != nil {
		t.Fatalf("start river: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := client.Stop(ctx); err != nil {
			t.Errorf("stop river: %v", err)
		}
		if err := svc.GroupCommit().Drain(ctx); err != nil {
			t.Errorf("drain: %v", err)
		}
	})
	return st
}

// startService starts a worker service of cfg on pool with the tests'
// quick fetch settings (and a silent logger unless cfg has one), and stops
// it when the test ends.
func startService(t *testing.T, pool *pgxpool.Pool, cfg jobs.Config) *jobs.Service {
	t.Helper()
	cfg.Work, cfg.RescueAfter = true, 2*time.Second
	cfg.FetchCooldown, cfg.FetchPollInterval = 5*time.Millisecond, 20*time.Millisecond
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	svc, err := jobs.NewService(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := svc.Stop(ctx); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	return svc
}

// waitTerminal polls the event until its run is terminal and returns the
// run with its attempts.
func waitTerminal(t *testing.T, st *store.Store, eventID uuid.UUID, timeout time.Duration) *converge.Run {
	t.Helper()
	var run *converge.Run
	testkit.Eventually(t, timeout, func() (bool, string) {
		ev, err := st.EventGet(t.Context(), eventID)
		if err != nil {
			t.Fatalf("get event: %v", err)
		}
		run = ev.Runs[len(ev.Runs)-1]
		return run.Status.Terminal(), fmt.Sprintf("run %s still %s (%d attempts)", run.ID, run.Status, run.Attempts)
	})
	return run
}

// testBackoff is the retry policy of the worker tests: short, so that the
// delays can be measured.
var testBackoff = converge.Backoff{Initial: 100 * time.Millisecond, Max: time.Second, MaxRetryAfter: 1500 * time.Millisecond}

// slack is how late an attempt may start past its backoff ceiling: River's
// completer and poll interval, the fetch, and a loaded machine (two cores
// shared by several test processes, all under the race detector). The exact
// bounds of the delay converge chooses are checked by TestBackoffDelay in
// the root package; here the lower bounds are exact and the upper ones
// catch an attempt left waiting for River's scheduler or a long poll.
const slack = time.Second

// TestRunWorker runs one event per case through the real worker, River
// client and HTTP target against a fake target server that fails on cue.
// The events run at the same time, each in a kind (queue) of its own.
func TestRunWorker(t *testing.T) {
	t.Parallel()
	hang := func(_ int, w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
		answer(w, 200, `{}`)
	}
	cases := []struct {
		name        string
		respond     func(n int, w http.ResponseWriter, r *http.Request) // nil: nothing listens
		maxAttempts int
		timeout     time.Duration
		// want
		status     converge.RunStatus
		outcomes   []converge.AttemptOutcome
		class      converge.ErrorClass // of the run's error; "" for none
		httpStatus int                 // of the run's error; 0 for none
		message    string              // in the run's error message
		check      func(t *testing.T, run *converge.Run, calls []call)
	}{
		{
			name:        "success",
			respond:     func(_ int, w http.ResponseWriter, _ *http.Request) { answer(w, 200, `{"artifact":"web@1"}`) },
			maxAttempts: 5,
			status:      converge.RunSucceeded,
			outcomes:    []converge.AttemptOutcome{converge.OutcomeSucceeded},
			check: func(t *testing.T, run *converge.Run, _ []call) {
				if string(run.Output) != `{"artifact": "web@1"}` && string(run.Output) != `{"artifact":"web@1"}` {
					t.Errorf("output %s, want the target's JSON answer", run.Output)
				}
				if run.Error != nil {
					t.Errorf("error %+v on success", run.Error)
				}
			},
		},
		{
			name: "503 three times then 200",
			respond: func(n int, w http.ResponseWriter, _ *http.Request) {
				if n <= 3 {
					answer(w, 503, `{"error":"busy"}`)
					return
				}
				answer(w, 200, `{"ok":true}`)
			},
			maxAttempts: 5,
			status:      converge.RunSucceeded,
			outcomes: []converge.AttemptOutcome{converge.OutcomeTransientError, converge.OutcomeTransientError,
				converge.OutcomeTransientError, converge.OutcomeSucceeded},
			check: func(t *testing.T, run *converge.Run, _ []call) {
				// SPEC §6: the delay before attempt n+1 is drawn from the
				// upper half of min(max, initial·2^(n-1)).
				h := run.AttemptHistory
				for n := 1; n < len(h); n++ {
					delay := h[n].StartedAt.Sub(*h[n-1].FinishedAt)
					ceil := testBackoff.Ceiling(n)
					t.Logf("delay before attempt %d: %s (bounds [%s, %s])", n+1, delay, ceil/2, ceil)
					if delay < ceil/2-5*time.Millisecond || delay > ceil+slack {
						t.Errorf("delay before attempt %d = %s, want within [%s, %s] (+%s slack)", n+1, delay, ceil/2, ceil, slack)
					}
				}
				for i, a := range h[:3] {
					if a.Error == nil || a.Error.Class != converge.ClassTransient || a.Error.HTTPStatus == nil || *a.Error.HTTPStatus != 503 {
						t.Errorf("attempt %d error %+v, want transient 503", i+1, a.Error)
					}
				}
			},
		},
		{
			name:        "429 with Retry-After",
			respond:     retryAfterOnce(429, `{"error":"slow down"}`, "1"),
			maxAttempts: 5,
			status:      converge.RunSucceeded,
			outcomes:    []converge.AttemptOutcome{converge.OutcomeTransientError, converge.OutcomeSucceeded},
			check: func(t *testing.T, run *converge.Run, calls []call) {
				h := run.AttemptHistory
				if d := h[1].StartedAt.Sub(*h[0].FinishedAt); d < time.Second {
					t.Errorf("attempt 2 started %s after attempt 1 ended, want at least the Retry-After of 1s", d)
				}
				if d := calls[1].at.Sub(calls[0].at); d < time.Second {
					t.Errorf("target called again after %s, want at least 1s", d)
				}
				if e := h[0].Error; e == nil || e.HTTPStatus == nil || *e.HTTPStatus != 429 {
					t.Errorf("attempt 1 error %+v, want http_status 429", e)
				}
			},
		},
		{
			// SPEC §6: a Retry-After longer than backoff.max_retry_after
			// (1.5s here) is cut to it, and the attempt's error says so.
			name:        "Retry-After of an hour cut to max_retry_after",
			respond:     retryAfterOnce(503, `{"error":"maintenance"}`, "3600"),
			maxAttempts: 5,
			status:      converge.RunSucceeded,
			outcomes:    []converge.AttemptOutcome{converge.OutcomeTransientError, converge.OutcomeSucceeded},
			check: func(t *testing.T, run *converge.Run, _ []call) {
				h := run.AttemptHistory
				if d := h[1].StartedAt.Sub(*h[0].FinishedAt); d < 1500*time.Millisecond || d > 10*time.Second {
					t.Errorf("attempt 2 started %s after attempt 1 ended, want the cut Retry-After of 1.5s", d)
				}
				if e := h[0].Error; e == nil || !strings.Contains(e.Message, "Retry-After of 1h0m0s cut to backoff.max_retry_after, 1.5s") {
					t.Errorf("attempt 1 error %+v, want it to say the Retry-After was cut", e)
				}
			},
		},
		{
			// A Retry-After beyond what a duration holds is cut alike,
			// and the error says how long it was, not the largest
			// duration.
			name:        "Retry-After beyond a duration cut to max_retry_after",
			respond:     retryAfterOnce(503, `{"error":"maintenance"}`, "99999999999999999999999"),
			maxAttempts: 5,
			status:      converge.RunSucceeded,
			outcomes:    []converge.AttemptOutcome{converge.OutcomeTransientError, converge.OutcomeSucceeded},
			check: func(t *testing.T, run *converge.Run, _ []call) {
				if e := run.AttemptHistory[0].Error; e == nil || !strings.Contains(e.Message, "Retry-After of over 292 years cut to backoff.max_retry_after, 1.5s") {
					t.Errorf("attempt 1 error %+v, want it to say the Retry-After was cut", e)
				}
			},
		},
		{
			name: "400 is permanent",
			respond: func(_ int, w http.ResponseWriter, _ *http.Request) {
				answer(w, 400, `{"error":"bad build definition"}`)
			},
			maxAttempts: 5,
			status:      converge.RunFailed,
			outcomes:    []converge.AttemptOutcome{converge.OutcomePermanentError},
			class:       converge.ClassPermanent,
			httpStatus:  400,
			message:     "bad build definition",
		},
		{
			name:        "always 500",
			respond:     func(_ int, w http.ResponseWriter, _ *http.Request) { answer(w, 500, `{"error":"boom"}`) },
			maxAttempts: 3,
			status:      converge.RunFailed,
			outcomes: []converge.AttemptOutcome{converge.OutcomeTransientError, converge.OutcomeTransientError,
				converge.OutcomeTransientError},
			class:      converge.ClassTransient,
			httpStatus: 500,
			message:    "500",
		},
		{
			name:        "timeout",
			respond:     hang,
			maxAttempts: 2,
			timeout:     200 * time.Millisecond,
			status:      converge.RunFailed,
			outcomes:    []converge.AttemptOutcome{converge.OutcomeTransientError, converge.OutcomeTransientError},
			class:       converge.ClassTransient,
			message:     "timed out",
			check: func(t *testing.T, run *converge.Run, _ []call) {
				for _, a := range run.AttemptHistory {
					if a.DurationMS == nil || *a.DurationMS < 150 || *a.DurationMS > 5000 {
						t.Errorf("attempt %d took %v ms, want about the 200ms timeout", a.Number, a.DurationMS)
					}
				}
			},
		},
		{
			name:        "connection refused",
			maxAttempts: 2,
			status:      converge.RunFailed,
			outcomes:    []converge.AttemptOutcome{converge.OutcomeTransientError, converge.OutcomeTransientError},
			class:       converge.ClassTransient,
			message:     "refused",
		},
	}

	kinds := map[string]*jobs.Kind{}
	targets := map[string]*fakeTarget{}
	for i, tc := range cases {
		name := fmt.Sprintf("case%d", i)
		url := refusedURL(t)
		if tc.respond != nil {
			targets[name] = newFakeTarget(t, tc.respond)
			url = targets[name].srv.URL + "/build"
		}
		timeout := cmp.Or(tc.timeout, 5*time.Second)
		tg, err := target.NewHTTP(target.HTTPConfig{URL: url, Timeout: timeout})
		if err != nil {
			t.Fatalf("target: %v", err)
		}
		kinds[name] = &jobs.Kind{KindPolicy: converge.KindPolicy{Name: name, Timeout: timeout, MaxAttempts: tc.maxAttempts,
			Backoff: testBackoff, Concurrency: 2}, Target: tg}
	}
	st := startWorkers(t, kinds)

	// Submit every event first, so that they run at once.
	events := make([]*converge.EventAcceptResult, len(cases))
	for i, tc := range cases {
		res, err := st.EventAccept(t.Context(), store.EventAcceptParams{
			EventSubmission: converge.EventSubmission{
				Kind: fmt.Sprintf("case%d", i), Resource: "app/web", Version: int64(40 + i),
				Payload: json.RawMessage(`{"ref":"main","n":` + strconv.Itoa(i) + `}`),
			},
			MaxAttempts: tc.maxAttempts,
		})
		if err != nil {
			t.Fatalf("accept %s: %v", tc.name, err)
		}
		events[i] = res
	}

	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			kind := fmt.Sprintf("case%d", i)
			run := waitTerminal(t, st, events[i].Event.ID, 20*time.Second)
			if run.Status != tc.status {
				t.Errorf("status %s, want %s (error %+v)", run.Status, tc.status, run.Error)
			}
			if run.Attempts != len(tc.outcomes) || len(run.AttemptHistory) != len(tc.outcomes) {
				t.Fatalf("%d attempts (%d recorded), want %d", run.Attempts, len(run.AttemptHistory), len(tc.outcomes))
			}
			for j, a := range run.AttemptHistory {
				if a.Number != j+1 || a.Outcome != tc.outcomes[j] {
					t.Errorf("attempt %d: number %d outcome %s, want %s", j+1, a.Number, a.Outcome, tc.outcomes[j])
				}
				if a.FinishedAt == nil || a.FinishedAt.Before(a.StartedAt) || a.DurationMS == nil {
					t.Errorf("attempt %d timing: started %s finished %v duration %v", j+1, a.StartedAt, a.FinishedAt, a.DurationMS)
				}
				if (a.Error == nil) != (a.Outcome == converge.OutcomeSucceeded) {
					t.Errorf("attempt %d: outcome %s with error %+v", j+1, a.Outcome, a.Error)
				}
			}
			if tc.class == "" {
				if run.Error != nil {
					t.Errorf("run error %+v, want none", run.Error)
				}
			} else {
				e := run.Error
				switch {
				case e == nil:
					t.Errorf("run has no error, want class %s", tc.class)
				case e.Class != tc.class:
					t.Errorf("run error class %s, want %s", e.Class, tc.class)
				case tc.httpStatus != 0 && (e.HTTPStatus == nil || *e.HTTPStatus != tc.httpStatus):
					t.Errorf("run error http_status %v, want %d", e.HTTPStatus, tc.httpStatus)
				case tc.httpStatus == 0 && e.HTTPStatus != nil:
					t.Errorf("run error http_status %d, want none", *e.HTTPStatus)
				case !strings.Contains(e.Message, tc.message):
					t.Errorf("run error message %q, want it to mention %q", e.Message, tc.message)
				}
			}
			if run.FinishedAt == nil || run.StartedAt == nil || run.NextAttemptAt != nil {
				t.Errorf("run times: started %v finished %v next %v", run.StartedAt, run.FinishedAt, run.NextAttemptAt)
			}

			stream, err := st.StreamGet(t.Context(), kind, "app/web")
			if err != nil {
				t.Fatalf("stream: %v", err)
			}
			wantApplied := tc.status == converge.RunSucceeded
			if applied := stream.AppliedVersion != nil && *stream.AppliedVersion == int64(40+i); applied != wantApplied || stream.ActiveRun != nil {
				t.Errorf("stream applied_version %v active run %v, want applied %t and none active", stream.AppliedVersion, stream.ActiveRun, wantApplied)
			}

			f := targets[kind]
			if f == nil {
				return
			}
			calls := f.received()
			if len(calls) != len(tc.outcomes) {
				t.Fatalf("target received %d calls, want %d", len(calls), len(tc.outcomes))
			}
			for j, c := range calls {
				for k, want := range map[string]string{
					"Content-Type":     "application/json",
					"Idempotency-Key":  run.ID.String(),
					"Converge-Attempt": strconv.Itoa(j + 1),
				} {
					if got := c.header.Get(k); got != want {
						t.Errorf("call %d header %s = %q, want %q", j+1, k, got, want)
					}
				}
				want := map[string]any{
					"event_id": events[i].Event.ID.String(), "run_id": run.ID.String(), "attempt": float64(j + 1),
					"kind": kind, "resource": "app/web", "version": float64(40 + i),
					"payload": map[string]any{"ref": "main", "n": float64(i)},
				}
				if fmt.Sprint(c.body) != fmt.Sprint(want) {
					t.Errorf("call %d body %v, want %v", j+1, c.body, want)
				}
			}
			if tc.check != nil {
				tc.check(t, run, calls)
			}
		})
	}

	// A finished run is never called again: every job is done, and no
	// target saw more calls than its run has attempts.
	testkit.Eventually(t, 10*time.Second, func() (bool, string) {
		var open int
		if err := st.Pool().QueryRow(t.Context(), `SELECT count(*) FROM river_job WHERE state NOT IN ('completed', 'cancelled', 'discarded')`).Scan(&open); err != nil {
			t.Fatalf("count jobs: %v", err)
		}
		return open == 0, fmt.Sprintf("%d River jobs still open after every run finished", open)
	})
	for i, tc := range cases {
		if f := targets[fmt.Sprintf("case%d", i)]; f != nil && len(f.received()) != len(tc.outcomes) {
			t.Errorf("%s: target received %d calls, want %d", tc.name, len(f.received()), len(tc.outcomes))
		}
	}
}
