package ui

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/api"
)

func TestHistoryEntriesNewestFirst(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func(d time.Duration) *time.Time { v := t0.Add(d); return &v }
	ms := int64(3)
	runID := uuid.New()
	events := []*converge.Event{
		{ID: uuid.New(), Version: 2, ReceivedAt: t0.Add(time.Minute), Runs: []*converge.Run{{ID: uuid.New(), Number: 1, Status: converge.RunQueued, CreatedAt: t0.Add(time.Minute)}}},
		{ID: uuid.New(), Version: 1, ReceivedAt: t0, Runs: []*converge.Run{{ID: runID, Number: 1, Status: converge.RunSuperseded, CreatedAt: t0, FinishedAt: at(time.Minute),
			AttemptHistory: []*converge.Attempt{{Number: 1, Outcome: converge.OutcomeCancelled, StartedAt: t0.Add(time.Second), DurationMS: &ms}}}}},
	}
	got := historyEntries(events, nil, nil)
	var titles []string
	for _, e := range got {
		titles = append(titles, e.Title)
	}
	want := []string{"Run #1 queued", "Event accepted", "Run #1", "Attempt 1 of run #1", "Run #1 queued", "Event accepted"}
	if len(titles) != len(want) {
		t.Fatalf("titles %q, want %q", titles, want)
	}
	for i := range want {
		if titles[i] != want[i] {
			t.Fatalf("titles %q, want %q", titles, want)
		}
	}
	if got[2].What != "supersession" || got[2].Detail != "by version 2" || got[2].Version != 1 {
		t.Errorf("supersession entry %+v", got[2])
	}
}

func TestSearchText(t *testing.T) {
	t.Parallel()
	for pattern, want := range map[string]string{
		"POST http://<ip>:<n>/build: 422 Unprocessable Entity: manifest invalid: field <hex> is not allowed": "build: 422 Unprocessable Entity: manifest invalid: field",
		"<id>": "",
		"context deadline exceeded (timeout after 30s)": "context deadline exceeded (timeout after 30s",
	} {
		if got := searchText(pattern); got != want {
			t.Errorf("searchText(%q) = %q, want %q", pattern, got, want)
		}
	}
}

// TestCursorRoundTrip checks the dead-letter cursor the dashboard's pages
// carry, which is the API's (api.EncodeDeadLetterCursor).
func TestCursorRoundTrip(t *testing.T) {
	t.Parallel()
	c := converge.DeadLetterCursor{CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 123456000, time.UTC), ID: uuid.New()}
	got, err := api.DecodeDeadLetterCursor(api.EncodeDeadLetterCursor(c))
	if err != nil || got == nil || !got.CreatedAt.Equal(c.CreatedAt) || got.ID != c.ID {
		t.Fatalf("round trip: %+v %v, want %+v", got, err, c)
	}
	for _, bad := range []string{"!", "bm9wZQ", api.EncodeDeadLetterCursor(c)[:10]} {
		if _, err := api.DecodeDeadLetterCursor(bad); err == nil {
			t.Errorf("DecodeDeadLetterCursor(%q) accepted", bad)
		}
	}
}

func TestSafeNext(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"/ui/dead-letters?kind=build": "/ui/dead-letters?kind=build",
		"//evil.example/":             "/ui/",
		"https://evil.example/ui/":    "/ui/",
		"/ui/\\evil":                  "/ui/",
		"/v1/events":                  "/ui/",
		"":                            "/ui/",
		"/ui/../../evil":              "/ui/",
		"/ui/./dead-letters":          "/ui/",
		"/ui/streams/build/app/web":   "/ui/streams/build/app/web",
		"/ui/dead-letters?q=a/../b":   "/ui/dead-letters?q=a/../b",
	} {
		if got := safeNext(in); got != want {
			t.Errorf("safeNext(%q) = %q, want %q", in, got, want)
		}
	}
}
