package target

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/converge-run/converge"
)

// slack is how late a call may end on a loaded machine and still count as
// prompt: far below the minute the tests' servers and commands would
// otherwise take.
const slack = 5 * time.Second

// testRequest returns a request with distinct values in every field.
func testRequest() Request {
	return Request{
		EventID:  uuid.MustParse("0195a8e2-1111-7000-8000-000000000001"),
		RunID:    uuid.MustParse("0195a8e2-2222-7000-8000-000000000002"),
		Attempt:  3,
		Kind:     "build",
		Resource: "app/web",
		Version:  42,
		Payload:  json.RawMessage(`{"sha":"abc123","n":[1,2]}`),
	}
}

// attemptErr returns err as an *converge.AttemptError, failing the test if
// it is not one.
func attemptErr(t *testing.T, err error) *converge.AttemptError {
	t.Helper()
	var ae *converge.AttemptError
	if !errors.As(err, &ae) {
		t.Fatalf("error %v (%T) is not an *converge.AttemptError", err, err)
	}
	return ae
}

// callCancelled calls tg with a context cancelled, with a cause, once
// started returns, and checks what a cancelled call must do: return
// within slack of the cancel with an *converge.AttemptError that wraps
// context.Canceled and the cause and is no timeout. It returns the
// cancelled context, for a call after it.
func callCancelled(t *testing.T, tg Target, started func()) context.Context {
	t.Helper()
	superseded := errors.New("superseded by version 43")
	ctx, cancel := context.WithCancelCause(t.Context())
	cancelled := make(chan time.Time, 1)
	go func() {
		started()
		cancelled <- time.Now()
		cancel(superseded)
	}()
	_, err := tg.Call(ctx, testRequest())
	if elapsed := time.Since(<-cancelled); elapsed > slack {
		t.Errorf("call returned %s after its context was cancelled", elapsed)
	}
	if !errors.Is(err, context.Canceled) || !errors.Is(err, superseded) {
		t.Errorf("error %v does not wrap context.Canceled and the cause", err)
	}
	if errors.Is(err, ErrTimeout) {
		t.Errorf("cancellation reported as a timeout: %v", err)
	}
	_ = attemptErr(t, err) // fails the test unless err is an *AttemptError
	return ctx
}

// checkBody checks that b is the JSON document of req.
func checkBody(t *testing.T, b []byte, req Request) {
	t.Helper()
	var got map[string]json.RawMessage
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("body %q is not a JSON object: %v", b, err)
	}
	want := map[string]string{
		"event_id": `"` + req.EventID.String() + `"`,
		"run_id":   `"` + req.RunID.String() + `"`,
		"attempt":  `3`,
		"kind":     `"build"`,
		"resource": `"app/web"`,
		"version":  `42`,
		"payload":  string(req.Payload),
	}
	if len(got) != len(want) {
		t.Errorf("body has %d fields, want %d: %s", len(got), len(want), b)
	}
	for k, v := range want {
		if string(got[k]) != v {
			t.Errorf("body field %s = %s, want %s", k, got[k], v)
		}
	}
}
