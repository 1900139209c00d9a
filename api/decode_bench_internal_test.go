package api

import (
	"bytes"
	"strings"
	"testing"
)

// BenchmarkDecodeStrict measures the strict decoding of a POST /v1/events
// body (decodeStrictJSON), small and near max_payload_bytes, and beside it,
// as its anchor, the share of it that checkFieldCase takes.
func BenchmarkDecodeStrict(b *testing.B) {
	for _, x := range []struct {
		name string
		n    int
	}{{"small", 512}, {"large", 200000}} {
		data := []byte(`{"kind":"build","resource":"app/web","version":1,"payload":{"s":"` + strings.Repeat("abcdefgh", x.n/8) + `","n":[1,2,3]}}`)
		b.Run("decode-"+x.name, func(b *testing.B) {
			for b.Loop() {
				var req eventRequest
				if err := decodeStrictJSON(bytes.NewReader(data), 1<<20, &req); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("fieldcase-"+x.name, func(b *testing.B) {
			for b.Loop() {
				var req eventRequest
				if err := checkFieldCase(data, &req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
