package target

import (
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
