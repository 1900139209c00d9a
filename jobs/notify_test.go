package jobs_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/jobs"
)

// TestNotificationBody: the standard body has type, timestamp and data
// with the stream, the subject's id and its dashboard link; the slack
// body is one line of text with the same facts and the link.
func TestNotificationBody(t *testing.T) {
	t.Parallel()
	id, run := uuid.New(), uuid.New()
	at := time.Date(2026, 12, 2, 5, 47, 38, 0, time.UTC)
	q := at.Add(-time.Second)
	cases := []struct {
		n         converge.NotificationArgs
		link      string
		slackHas  []string
		extraData map[string]any
	}{
		{converge.NotificationArgs{Type: converge.NotifyDeadLetterCreated, At: at, Subject: converge.NotificationSubject{ID: id, Kind: "build", Resource: "app/web",
			Version: 7, RunID: &run, Reason: "permanent_error", Error: "POST http://t/build: 422\nUnprocessable"}},
			"https://cv.example.com/ui/dead-letters/" + id.String(),
			[]string{"Dead letter: build app/web@7 failed (permanent error): POST http://t/build: 422 Unprocessable"},
			map[string]any{"reason": "permanent_error", "run_id": run.String()}},
		{converge.NotificationArgs{Type: converge.NotifyWorkflowRunFailed, At: at, Subject: converge.NotificationSubject{ID: id, Kind: "deploy", Resource: "app/web",
			Version: 3, Workflow: "release", Step: "staging"}},
			"https://cv.example.com/ui/workflow-runs/" + id.String(),
			[]string{"Workflow run failed: release app/web@3 (step staging)"},
			map[string]any{"workflow": "release", "step": "staging"}},
		{converge.NotificationArgs{Type: converge.NotifyRunHeld, At: at, Subject: converge.NotificationSubject{ID: run, Kind: "deploy", Resource: "prod/web",
			Version: 12, Hold: []string{"approval"}}},
			"https://cv.example.com/ui/streams/deploy/prod/web",
			[]string{"Run held for approval: deploy prod/web@12"},
			map[string]any{"hold": []any{"approval"}}},
		{converge.NotificationArgs{Type: converge.NotifyStreamQuarantined, At: at, Subject: converge.NotificationSubject{ID: run, Kind: "build", Resource: "lib/core",
			Version: 4, QuarantinedAt: &q}},
			"https://cv.example.com/ui/streams/build/lib/core",
			[]string{"Stream quarantined: build lib/core"},
			map[string]any{"quarantined_at": q.Format(time.RFC3339)}},
	}
	for _, c := range cases {
		if got := jobs.NotificationURL("https://cv.example.com/", c.n); got != c.link {
			t.Errorf("%s: url %q, want %q", c.n.Type, got, c.link)
		}
		b, err := jobs.NotificationBody(jobs.NotifyFormatStandard, c.n, "https://cv.example.com")
		if err != nil {
			t.Fatal(err)
		}
		var body struct {
			Type      string         `json:"type"`
			Timestamp time.Time      `json:"timestamp"`
			Data      map[string]any `json:"data"`
		}
		if err := json.Unmarshal(b, &body); err != nil {
			t.Fatal(err)
		}
		d := body.Data
		if body.Type != c.n.Type || !body.Timestamp.Equal(at) || d["kind"] != c.n.Subject.Kind || d["resource"] != c.n.Subject.Resource ||
			d["version"] != float64(c.n.Subject.Version) || d["id"] != c.n.Subject.ID.String() || d["url"] != c.link {
			t.Errorf("%s: standard body %s", c.n.Type, b)
		}
		for k, v := range c.extraData {
			if x, _ := json.Marshal(d[k]); string(x) != mustJSON(v) {
				t.Errorf("%s: data.%s = %s, want %s", c.n.Type, k, x, mustJSON(v))
			}
		}
		b, err = jobs.NotificationBody(jobs.NotifyFormatSlack, c.n, "https://cv.example.com")
		if err != nil {
			t.Fatal(err)
		}
		var slack map[string]string
		if err := json.Unmarshal(b, &slack); err != nil || len(slack) != 1 {
			t.Fatalf("%s: slack body %s", c.n.Type, b)
		}
		text := slack["text"]
		if strings.Contains(text, "\n") || !strings.HasSuffix(text, " "+c.link) {
			t.Errorf("%s: slack text %q: want one line ending with the link", c.n.Type, text)
		}
		for _, s := range c.slackHas {
			if !strings.Contains(text, s) {
				t.Errorf("%s: slack text %q does not say %q", c.n.Type, text, s)
			}
		}
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
