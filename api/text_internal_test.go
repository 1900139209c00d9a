package api

import (
	"runtime"
	"strings"
	"testing"
)

// TestCheckBodyTextDeepBody: a body that nests deep (here 20,000 arrays in
// the payload, after a lone surrogate escape in kind, which starts the
// walk) costs the walk memory in proportion to the body, not to the square
// of its depth, and the bad field is still named.
func TestCheckBodyTextDeepBody(t *testing.T) {
	const depth = 20000
	body := []byte(`{"kind":"\ud800","resource":"a","version":1,"payload":` + strings.Repeat("[", depth) + strings.Repeat("]", depth) + `}`)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	err := checkBodyText(body, "payload")
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), "kind") {
		t.Fatalf("checkBodyText = %v, want kind named", err)
	}
	// The decoder's own tokens cost a few dozen bytes each; a path kept
	// per open array would cost about 3 × depth² / 2 bytes (600 MB).
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 64*uint64(len(body))+1<<20 {
		t.Errorf("checkBodyText allocated %d bytes for a %d-byte body", alloc, len(body))
	}
}

// TestHasSurrogateEscape: only a lone surrogate escape (or what looks like
// one) starts the walk; an escaped pair and Hangul escapes do not.
func TestHasSurrogateEscape(t *testing.T) {
	for body, want := range map[string]bool{
		`{"a":"\ud83d\ude00"}`:        false, // an emoji, as Python's json.dumps writes it
		`{"a":"\uD83D\uDE00 \uD55C"}`: false, // upper case, and Hangul
		`{"a":"\ud800"}`:              true,
		`{"a":"\ud800x"}`:             true,
		`{"a":"\ud800\u0041"}`:        true,
		`{"a":"\udc00"}`:              true,
		`{"a":"x\ud83d"}`:             true, // a high half at the end
		`{"a":"\u00e9"}`:              false,
		`{"a":"\\ud800"}`:             true, // text, but it looks like one: a walk that finds nothing
	} {
		if got := hasSurrogateEscape([]byte(body)); got != want {
			t.Errorf("hasSurrogateEscape(%s) = %v, want %v", body, got, want)
		}
	}
}
