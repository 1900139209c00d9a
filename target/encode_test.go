package target

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/google/uuid"
)

// TestEncodeSameAsMarshal holds encode's hand-written fast path to the
// bytes json.Marshal makes of the request body, for plain and awkward
// kinds, resources and payloads.
func TestEncodeSameAsMarshal(t *testing.T) {
	strs := []string{"", "deploy", "svc/api-1", `a"b`, `a\b`, "<x>", "a&b", "é", "tab\there", "\x00", "line\u2028sep", "\xff"}
	payloads := []string{"", "null", "{}", `{"a": 1, "b" : [1, 2]}`, `{"html":"<b>&</b>"}`, `"\u2028"`, "\"\u2028\"", `{"x":"é"}`, "  [ ]  ", `{"a":`, `nope`, `{"s":"\xff"}`, `123`}
	for _, kind := range strs {
		for _, res := range strs {
			for _, p := range payloads {
				req := Request{EventID: uuid.New(), RunID: uuid.New(), Attempt: 3, Kind: kind, Resource: res, Version: -7}
				if p != "" {
					req.Payload = json.RawMessage(p)
				}
				want, wantErr := json.Marshal(body(req))
				got, err := req.encode()
				if (err != nil) != (wantErr != nil) {
					t.Fatalf("kind %q resource %q payload %q: error %v, json.Marshal's %v", kind, res, p, err, wantErr)
				}
				if err == nil && !bytes.Equal(got, want) {
					t.Fatalf("kind %q resource %q payload %q:\n got %s\nwant %s", kind, res, p, got, want)
				}
			}
		}
	}
}

func BenchmarkEncode(b *testing.B) {
	req := Request{EventID: uuid.New(), RunID: uuid.New(), Attempt: 1, Kind: "bench", Resource: "resource-0042", Version: 17, Payload: json.RawMessage(`{}`)}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := req.encode(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncodeMarshal is what encode did before: json.Marshal.
func BenchmarkEncodeMarshal(b *testing.B) {
	req := Request{EventID: uuid.New(), RunID: uuid.New(), Attempt: 1, Kind: "bench", Resource: "resource-0042", Version: 17, Payload: json.RawMessage(`{}`)}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := json.Marshal(body(req)); err != nil {
			b.Fatal(err)
		}
	}
}
