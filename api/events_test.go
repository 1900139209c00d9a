package api_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/store"
	"github.com/converge-run/converge/test/pgtest"
)

// TestEventCreateInvalid sends every kind of bad POST /v1/events of SPEC §4
// and checks its status, problem type and field, and that nothing was
// written (G9). It has a database of its own so that the row counts are
// its alone.
func TestEventCreateInvalid(t *testing.T) {
	t.Parallel()
	s := evNewStack(t, pgtest.NewDatabase(t))
	const json = "application/json"
	big := `{"blob":"` + strings.Repeat("x", evMaxPayload) + `"}`
	huge := `{"blob":"` + strings.Repeat("x", 4*evMaxPayload+64<<10) + `"}`
	valid := func(field, value string) string {
		m := map[string]string{"kind": `"build"`, "resource": `"app/web"`, "version": `1`}
		m[field] = value
		b := `{"kind":` + m["kind"] + `,"resource":` + m["resource"] + `,"version":` + m["version"]
		if p, ok := m["payload"]; ok {
			b += `,"payload":` + p
		}
		return b + `}`
	}
	cases := []struct {
		name        string
		contentType string
		body        string
		status      int
		slug        string
		field       string // the field named in errors[], for 422
	}{
		{"malformed json", json, `{"kind":"build",`, 400, "malformed-json", ""},
		{"not json at all", json, `kind=build`, 400, "malformed-json", ""},
		{"empty body", json, ``, 400, "malformed-json", ""},
		{"trailing data", json, valid("version", "1") + `{}`, 400, "malformed-json", ""},
		{"invalid utf-8", json, `{"kind":"build","resource":"app/web","version":1,"payload":{"a":"` + "\xff\xfe" + `"}}`, 422, "invalid-request", "payload"},
		{"invalid utf-8 and not json", json, `{"kind":"build","resource":"` + "\xff" + `",`, 400, "malformed-json", ""},
		{"no content type", "", valid("version", "1"), 415, "unsupported-media-type", ""},
		{"text/plain", "text/plain", valid("version", "1"), 415, "unsupported-media-type", ""},
		{"form", "application/x-www-form-urlencoded", valid("version", "1"), 415, "unsupported-media-type", ""},
		{"garbage content type", ";;;", valid("version", "1"), 415, "unsupported-media-type", ""},
		{"+json outside application/", "text/x+json", valid("version", "1"), 415, "unsupported-media-type", ""},
		{"payload over the limit", json, valid("payload", big), 413, "payload-too-large", ""},
		{"body far over the limit", json, valid("payload", huge), 413, "payload-too-large", ""},
		{"version 0", json, valid("version", "0"), 422, "invalid-request", "version"},
		{"version negative", json, valid("version", "-3"), 422, "invalid-request", "version"},
		{"version string", json, valid("version", `"5"`), 422, "invalid-request", "version"},
		{"version fraction", json, valid("version", "1.5"), 422, "invalid-request", "version"},
		{"version 1.0", json, valid("version", "1.0"), 422, "invalid-request", "version"},
		{"version 1e3", json, valid("version", "1e3"), 422, "invalid-request", "version"},
		{"version too large", json, valid("version", "9223372036854775808"), 422, "invalid-request", "version"},
		{"version far too large", json, valid("version", "123456789012345678901234567890"), 422, "invalid-request", "version"},
		{"version null", json, valid("version", "null"), 422, "invalid-request", "version"},
		{"version bool", json, valid("version", "true"), 422, "invalid-request", "version"},
		{"version object", json, valid("version", "{}"), 422, "invalid-request", "version"},
		{"version missing", json, `{"kind":"build","resource":"app/web"}`, 422, "invalid-request", "version"},
		{"unknown kind", json, valid("kind", `"bake"`), 422, "invalid-request", "kind"},
		{"kind not a string", json, valid("kind", `5`), 422, "invalid-request", "kind"},
		{"kind missing", json, `{"resource":"app/web","version":1}`, 422, "invalid-request", "kind"},
		{"resource empty", json, valid("resource", `""`), 422, "invalid-request", "resource"},
		{"resource 201 chars", json, valid("resource", `"`+strings.Repeat("a", 201)+`"`), 422, "invalid-request", "resource"},
		{"resource starts with -", json, valid("resource", `"-web"`), 422, "invalid-request", "resource"},
		{"resource starts with /", json, valid("resource", `"/web"`), 422, "invalid-request", "resource"},
		{"resource with space", json, valid("resource", `"app web"`), 422, "invalid-request", "resource"},
		{"resource unicode", json, valid("resource", `"app/wéb"`), 422, "invalid-request", "resource"},
		{"resource NUL", json, valid("resource", `"app\u0000"`), 422, "invalid-request", "resource"},
		{"resource missing", json, `{"kind":"build","version":1}`, 422, "invalid-request", "resource"},
		{"unknown top-level field", json, `{"kind":"build","resource":"app/web","version":1,"then":[]}`, 422, "invalid-request", "then"},
		{"payload array", json, valid("payload", `[1,2]`), 422, "invalid-request", "payload"},
		{"payload string", json, valid("payload", `"x"`), 422, "invalid-request", "payload"},
		{"payload number", json, valid("payload", `42`), 422, "invalid-request", "payload"},
		{"payload null", json, valid("payload", `null`), 422, "invalid-request", "payload"},
		{"payload bool", json, valid("payload", `true`), 422, "invalid-request", "payload"},
		{"payload with NUL", json, valid("payload", `{"a":"x\u0000y"}`), 422, "invalid-request", "payload"},
		{"payload key with NUL", json, valid("payload", `{"\u0000":1}`), 422, "invalid-request", "payload"},
		{"payload with NUL after a backslash", json, valid("payload", `{"a":"\\\u0000"}`), 422, "invalid-request", "payload"},
		{"payload lone surrogate", json, valid("payload", `{"a":"\ud800"}`), 422, "invalid-request", "payload"},
		{"payload number out of range", json, valid("payload", `{"a":1e1000000}`), 422, "invalid-request", "payload"},
		{"body an array", json, `[{"kind":"build","resource":"app/web","version":1}]`, 422, "invalid-request", "body"},
		{"body a string", json, `"build"`, 422, "invalid-request", "body"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := evRowCounts(t, s.pool)
			r := s.do(t, http.MethodPost, "/v1/events", strings.NewReader(tc.body), map[string]string{"Content-Type": tc.contentType})
			p := evWantProblem(t, r, tc.status, tc.slug)
			if tc.status == 422 && tc.field != "" {
				if fields := evFields(t, p); !slices.Contains(fields, tc.field) {
					t.Errorf("errors name %v, want %q", fields, tc.field)
				}
			}
			// SPEC §4: payload-too-large names the configured limit.
			if tc.status == 413 && !strings.Contains(fmt.Sprint(p["detail"]), "max_payload_bytes") {
				t.Errorf("detail %q does not name max_payload_bytes", p["detail"])
			}
			if after := evRowCounts(t, s.pool); after != before {
				t.Errorf("rows (events, runs, jobs, streams) went from %v to %v", before, after)
			}
		})
	}
	if c := evRowCounts(t, s.pool); c != [4]int{} {
		t.Errorf("rows (events, runs, jobs, streams) = %v after only bad requests, want none", c)
	}
}

// TestEventCreateChunkedOversized sends an oversized body without a
// Content-Length: the server stops reading at the limit and answers 413.
func TestEventCreateChunkedOversized(t *testing.T) {
	t.Parallel()
	s := evNewStack(t, "")
	pr, pw := io.Pipe()
	go func() {
		_, _ = io.WriteString(pw, `{"kind":"build","resource":"chunked/`+uuid.NewString()+`","version":1,"payload":{"blob":"`)
		chunk := strings.Repeat("y", 1024)
		for range 256 {
			if _, err := io.WriteString(pw, chunk); err != nil {
				return
			}
		}
		_, _ = io.WriteString(pw, `"}}`)
		_ = pw.Close()
	}()
	t.Cleanup(func() { _ = pr.Close() })
	r := s.do(t, http.MethodPost, "/v1/events", pr, map[string]string{"Content-Type": "application/json"})
	evWantProblem(t, r, http.StatusRequestEntityTooLarge, "payload-too-large")
}

// TestEventCreate checks the 202 answer's shape.
func TestEventCreate(t *testing.T) {
	t.Parallel()
	s := evNewStack(t, "")
	resource := "app/" + uuid.NewString()
	before := time.Now().UTC().Add(-time.Minute)
	r := s.do(t, http.MethodPost, "/v1/events", strings.NewReader(evBody("deploy", resource, 7, `{"ref":"main","n":[1,2]}`)),
		map[string]string{"Content-Type": "application/json; charset=utf-8"})
	evWantStatus(t, r, http.StatusAccepted)
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	var res struct {
		Event          map[string]json.RawMessage `json:"event"`
		Run            map[string]json.RawMessage `json:"run"`
		SupersededRuns []string                   `json:"superseded_runs"`
	}
	if err := json.Unmarshal(r.body, &res); err != nil {
		t.Fatalf("decode: %v\n%s", err, r.body)
	}
	wantKeys(t, "event", res.Event, "id", "kind", "resource", "version", "payload", "status", "received_at", "workflow_run_id")
	wantKeys(t, "run", res.Run, "id", "event_id", "number", "status", "hold", "attempts", "max_attempts", "next_attempt_at",
		"created_at", "started_at", "finished_at", "error", "output", "trace_id")
	// Tracing is off in this process: the run has no trace.
	if got := string(res.Run["trace_id"]); got != "null" {
		t.Errorf("run.trace_id = %s, want null (tracing off)", got)
	}
	for k, want := range map[string]string{
		"kind": `"deploy"`, "resource": `"` + resource + `"`, "version": `7`, "status": `"queued"`,
	} {
		if got := string(res.Event[k]); got != want {
			t.Errorf("event.%s = %s, want %s", k, got, want)
		}
	}
	var payload map[string]any
	if err := json.Unmarshal(res.Event["payload"], &payload); err != nil || payload["ref"] != "main" {
		t.Errorf("event.payload = %s", res.Event["payload"])
	}
	eventID := wantUUIDv7(t, "event.id", res.Event["id"])
	runID := wantUUIDv7(t, "run.id", res.Run["id"])
	if got := wantUUIDv7(t, "run.event_id", res.Run["event_id"]); got != eventID {
		t.Errorf("run.event_id %s, want %s", got, eventID)
	}
	for k, want := range map[string]string{
		"number": `1`, "status": `"queued"`, "attempts": `0`, "max_attempts": `3`,
		"next_attempt_at": `null`, "started_at": `null`, "finished_at": `null`, "error": `null`, "output": `null`,
	} {
		if got := string(res.Run[k]); got != want {
			t.Errorf("run.%s = %s, want %s", k, got, want)
		}
	}
	for name, raw := range map[string]json.RawMessage{"event.received_at": res.Event["received_at"], "run.created_at": res.Run["created_at"]} {
		ts := wantTime(t, name, raw)
		if ts.Before(before) || ts.After(time.Now().Add(time.Minute)) {
			t.Errorf("%s = %s, not now", name, ts)
		}
	}
	if res.SupersededRuns == nil || len(res.SupersededRuns) != 0 {
		t.Errorf("superseded_runs = %v, want []", res.SupersededRuns)
	}

	// The event, its run and its River job are committed.
	var jobs int
	err := s.pool.QueryRow(t.Context(), `SELECT count(*) FROM river_job j JOIN converge_runs r ON r.job_id = j.id
		WHERE r.id = $1 AND j.queue = 'deploy' AND j.state = 'available'`, runID).Scan(&jobs)
	if err != nil || jobs != 1 {
		t.Errorf("River jobs of the run: %d (%v), want 1", jobs, err)
	}

	// Without a payload, the payload is {}.
	r = s.post(t, evBody("build", resource, 1, ""))
	evWantStatus(t, r, http.StatusAccepted)
	if p, ok := r.json(t)["event"].(map[string]any)["payload"].(map[string]any); !ok || len(p) != 0 {
		t.Errorf("payload of an event without one: %s, want {}", r.body)
	}
}

// TestEventCreatePayloads checks that unusual but valid payloads are
// accepted and come back equal.
func TestEventCreatePayloads(t *testing.T) {
	t.Parallel()
	s := evNewStack(t, "")
	cases := []struct{ name, payload string }{
		{"empty", `{}`},
		{"whitespace", " {\n\t\"a\" : 1 } "},
		{"unicode escapes", `{"s":"\u00e9\ud83d\ude00\u2028","k\u00e9":"\\u0000"}`},
		{"raw unicode", `{"s":"é😀 中文"}`},
		{"numbers", `{"big":1e63,"small":-1e-61,"neg0":-0,"long":123456789012345678901234567890,"scaled":1.50e-2}`},
		{"nested 64 levels", `{"a":` + strings.Repeat("[", 63) + strings.Repeat("]", 63) + `}`},
		{"html", `{"s":"<script>alert(1)</script>&amp;"}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := s.post(t, evBody("build", "payload/"+uuid.NewString(), 1, tc.payload))
			evWantStatus(t, r, http.StatusAccepted)
			id := r.json(t)["event"].(map[string]any)["id"].(string)
			got := s.get(t, "/v1/events/"+id)
			evWantStatus(t, got, http.StatusOK)
			var ev struct {
				Payload json.RawMessage `json:"payload"`
			}
			if err := json.Unmarshal(got.body, &ev); err != nil {
				t.Fatalf("decode: %v", err)
			}
			var want, have any
			if err := json.Unmarshal([]byte(tc.payload), &want); err != nil {
				t.Fatalf("test payload: %v", err)
			}
			if err := json.Unmarshal(ev.Payload, &have); err != nil {
				t.Fatalf("stored payload %s: %v", ev.Payload, err)
			}
			if !reflect.DeepEqual(want, have) {
				t.Errorf("payload came back as %s, want %s", ev.Payload, tc.payload)
			}
		})
	}
}

// TestEventCreateBoundaries checks the edges of what is valid: resource
// keys of every allowed character and the longest length, and the largest
// version.
func TestEventCreateBoundaries(t *testing.T) {
	t.Parallel()
	s := evNewStack(t, "")
	unique := strings.ReplaceAll(uuid.NewString(), "-", "")
	cases := []struct {
		name     string
		resource string
		version  int64
	}{
		{"two characters", "q" + unique[:1], int64(time.Now().UnixNano())},
		{"every allowed character", "A-Za-z0-9._:/@-" + unique, 1},
		{"starts with a digit", "0" + unique, 1},
		{"200 characters", unique + strings.Repeat("a", 200-len(unique)), 1},
		{"largest version", "max/" + unique, 9223372036854775807},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := s.post(t, evBody("build", tc.resource, tc.version, `{}`))
			evWantStatus(t, r, http.StatusAccepted)
			ev := r.json(t)["event"].(map[string]any)
			if ev["resource"] != tc.resource {
				t.Errorf("resource %v, want %s", ev["resource"], tc.resource)
			}
			var got struct {
				Event struct {
					Version int64 `json:"version"`
				} `json:"event"`
			}
			if err := json.Unmarshal(r.body, &got); err != nil || got.Event.Version != tc.version {
				t.Errorf("version %d (%v), want %d", got.Event.Version, err, tc.version)
			}
			list := s.get(t, "/v1/events?resource="+url.QueryEscape(tc.resource))
			evWantStatus(t, list, http.StatusOK)
			if items := list.json(t)["items"].([]any); len(items) != 1 {
				t.Errorf("list by resource: %d items, want 1", len(items))
			}
		})
	}
}

// wantKeys checks that m has exactly keys.
func wantKeys(t *testing.T, what string, m map[string]json.RawMessage, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if _, ok := m[k]; !ok {
			t.Errorf("%s has no %q", what, k)
		}
	}
	for k := range m {
		if !slices.Contains(keys, k) {
			t.Errorf("%s has an unexpected field %q", what, k)
		}
	}
}

// wantUUIDv7 checks that raw is a JSON string holding a version 7 UUID.
func wantUUIDv7(t *testing.T, what string, raw json.RawMessage) uuid.UUID {
	t.Helper()
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatalf("%s = %s, not a string", what, raw)
	}
	id, err := uuid.Parse(s)
	if err != nil || id.Version() != 7 {
		t.Fatalf("%s = %s, not a v7 UUID", what, raw)
	}
	return id
}

// wantTime checks that raw is an RFC 3339 UTC timestamp.
func wantTime(t *testing.T, what string, raw json.RawMessage) time.Time {
	t.Helper()
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatalf("%s = %s, not a string", what, raw)
	}
	ts, err := time.Parse(time.RFC3339Nano, s)
	if err != nil || !strings.HasSuffix(s, "Z") {
		t.Fatalf("%s = %s, not RFC 3339 UTC", what, raw)
	}
	return ts
}

// TestEventReplayStaleConflict checks G5: a replay is 200 with the original
// event and changes nothing; a lower version is stale-version, an equal one
// with another payload version-conflict.
func TestEventReplayStaleConflict(t *testing.T) {
	t.Parallel()
	s := evNewStack(t, "")
	resource := "svc/" + uuid.NewString()
	count := func() [3]int {
		t.Helper()
		var c [3]int
		err := s.pool.QueryRow(t.Context(), `SELECT
			(SELECT count(*) FROM converge_events WHERE resource = $1),
			(SELECT count(*) FROM converge_runs WHERE resource = $1),
			(SELECT count(*) FROM converge_runs r JOIN river_job j ON j.id = r.job_id WHERE r.resource = $1)`, resource).
			Scan(&c[0], &c[1], &c[2])
		if err != nil {
			t.Fatalf("count: %v", err)
		}
		return c
	}

	first := s.post(t, evBody("build", resource, 3, `{"ref":"main","n":{"a":1,"b":[1,2]}}`))
	evWantStatus(t, first, http.StatusAccepted)
	orig := first.json(t)
	five := s.post(t, evBody("build", resource, 5, `{"ref":"v5"}`))
	evWantStatus(t, five, http.StatusAccepted)
	five3 := five.json(t)
	if sup := five3["superseded_runs"].([]any); len(sup) != 1 || sup[0] != orig["run"].(map[string]any)["id"] {
		t.Errorf("superseded_runs %v, want the run of version 3", sup)
	}
	stored := count()

	cases := []struct {
		name    string
		version int64
		payload string
		status  int
		slug    string
		eventOf map[string]any // for 200: whose event comes back
	}{
		{"replay, keys reordered", 3, `{ "n" : {"b":[1,2],"a":1}, "ref":"main" }`, 200, "", orig},
		{"replay of the latest", 5, `{"ref":"v5"}`, 200, "", five3},
		{"stale, accepted before with another payload", 3, `{"ref":"other"}`, 409, "stale-version", nil},
		{"stale, never seen", 4, `{"ref":"v4"}`, 409, "stale-version", nil},
		{"stale, version 1", 1, `{}`, 409, "stale-version", nil},
		{"conflict", 5, `{"ref":"changed"}`, 409, "version-conflict", nil},
		{"conflict, payload omitted", 5, ``, 409, "version-conflict", nil},
		{"stale with an unstorable payload", 3, `{"a":"\ud800"}`, 422, "invalid-request", nil},
		{"new version with an unstorable payload", 6, `{"a":-1e-20000}`, 422, "invalid-request", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := s.post(t, evBody("build", resource, tc.version, tc.payload))
			if tc.status == 200 {
				evWantStatus(t, r, 200)
				got := r.json(t)
				ev, want := got["event"].(map[string]any), tc.eventOf["event"].(map[string]any)
				if ev["id"] != want["id"] || ev["received_at"] != want["received_at"] {
					t.Errorf("event %v, want the original %v", ev, want)
				}
				if run := got["run"].(map[string]any); run["id"] != tc.eventOf["run"].(map[string]any)["id"] {
					t.Errorf("run %v, want the original run", run["id"])
				}
				if sup, ok := got["superseded_runs"].([]any); !ok || len(sup) != 0 {
					t.Errorf("superseded_runs %v, want []", got["superseded_runs"])
				}
			} else {
				p := evWantProblem(t, r, tc.status, tc.slug)
				if tc.slug == "stale-version" && p["latest_version"] != float64(5) {
					t.Errorf("latest_version %v, want 5", p["latest_version"])
				}
			}
			if c := count(); c != stored {
				t.Errorf("rows (events, runs, jobs) went from %v to %v", stored, c)
			}
		})
	}

	// The same version of another kind is another stream.
	evWantStatus(t, s.post(t, evBody("deploy", resource, 3, `{}`)), http.StatusAccepted)
}

// TestEventList checks the filters and pagination of GET /v1/events. It
// has a database of its own so that it knows every event there is.
func TestEventList(t *testing.T) {
	t.Parallel()
	s := evNewStack(t, pgtest.NewDatabase(t))
	// build a/1..a/5 (each supersedes the one before), build b/1, deploy a/1.
	var ids []string // in submission order
	submit := func(kind, resource string, version int64) {
		r := s.post(t, evBody(kind, resource, version, fmt.Sprintf(`{"i":%d}`, len(ids))))
		evWantStatus(t, r, http.StatusAccepted)
		ids = append(ids, r.json(t)["event"].(map[string]any)["id"].(string))
	}
	for v := range int64(5) {
		submit("build", "app/a", v+1)
	}
	submit("build", "app/b", 1)
	submit("deploy", "app/a", 1)
	all := slices.Clone(ids)
	slices.Reverse(all) // newest first

	list := func(t *testing.T, query string) (items []string, next any) {
		t.Helper()
		r := s.get(t, "/v1/events?"+query)
		evWantStatus(t, r, 200)
		body := r.json(t)
		next, ok := body["next_cursor"]
		if !ok {
			t.Fatalf("no next_cursor: %s", r.body)
		}
		raw, ok := body["items"].([]any)
		if !ok {
			t.Fatalf("items is not a list: %s", r.body)
		}
		items = []string{}
		for _, it := range raw {
			items = append(items, it.(map[string]any)["id"].(string))
		}
		return items, next
	}
	pick := func(idx ...int) []string {
		var out []string
		for _, i := range idx {
			out = append(out, ids[i])
		}
		slices.Reverse(out)
		return out
	}

	filters := []struct {
		query string
		want  []string
	}{
		{"", all},
		{"kind=build", pick(0, 1, 2, 3, 4, 5)},
		{"kind=deploy", pick(6)},
		{"kind=nothing", []string{}},
		{"resource=app/a", pick(0, 1, 2, 3, 4, 6)},
		{"resource=app", []string{}},
		{"kind=build&resource=app/a", pick(0, 1, 2, 3, 4)},
		{"status=superseded", pick(0, 1, 2, 3)},
		{"status=queued", pick(4, 5, 6)},
		{"status=queued&kind=build&resource=app/b", pick(5)},
		{"status=failed", []string{}},
	}
	for _, f := range filters {
		t.Run("filter "+f.query, func(t *testing.T) {
			items, next := list(t, f.query)
			if !slices.Equal(items, f.want) {
				t.Errorf("items %v, want %v", items, f.want)
			}
			if next != nil {
				t.Errorf("next_cursor %v on a single page", next)
			}
		})
	}

	t.Run("pages", func(t *testing.T) {
		var got []string
		query := "limit=3"
		pages := 0
		for {
			items, next := list(t, query)
			pages++
			if len(items) > 3 {
				t.Fatalf("page of %d items with limit 3", len(items))
			}
			got = append(got, items...)
			if next == nil {
				break
			}
			if pages > 5 {
				t.Fatal("pagination does not end")
			}
			query = "limit=3&cursor=" + next.(string)
		}
		if pages != 3 || !slices.Equal(got, all) {
			t.Errorf("%d pages, items %v, want 3 pages of %v (disjoint, newest first)", pages, got, all)
		}
		// An exact fit: the last page has a null cursor.
		items, next := list(t, "limit=7")
		if len(items) != 7 || next != nil {
			t.Errorf("limit=7: %d items, next_cursor %v", len(items), next)
		}
		// Filters apply across pages.
		items, next = list(t, "kind=build&limit=4")
		items2, next2 := list(t, "kind=build&limit=4&cursor="+next.(string))
		if !slices.Equal(append(items, items2...), pick(0, 1, 2, 3, 4, 5)) || next2 != nil {
			t.Errorf("filtered pages %v + %v (next %v)", items, items2, next2)
		}
	})

	bad := []struct {
		query, field string
	}{
		{"limit=0", "limit"},
		{"limit=501", "limit"},
		{"limit=-1", "limit"},
		{"limit=abc", "limit"},
		{"limit=1.5", "limit"},
		{"limit=", "limit"},
		{"cursor=!!!", "cursor"},
		{"cursor=" + strings.Repeat("A", 40), "cursor"},
		{"cursor=abc", "cursor"},
		{"status=done", "status"},
		{"status=QUEUED", "status"},
		{"resource=-x", "resource"},
		{"sort=asc", "sort"},
		{"kind=a&kind=b", "kind"},
		// A kind filter is a kind name, as the document's pattern and
		// GET /v1/dead-letters say.
		{"kind=BUILD", "kind"},
		{"kind=1build", "kind"},
		{"kind=a%20b", "kind"},
		{"kind=" + strings.Repeat("k", 64), "kind"},
	}
	for _, b := range bad {
		t.Run("bad "+b.query, func(t *testing.T) {
			p := evWantProblem(t, s.get(t, "/v1/events?"+b.query), 422, "invalid-request")
			if fields := evFields(t, p); !slices.Contains(fields, b.field) {
				t.Errorf("errors name %v, want %q", fields, b.field)
			}
		})
	}
	// Every status the document's enum lists is a filter, held too.
	for _, status := range []string{"queued", "held", "running", "retrying", "succeeded", "failed", "superseded", "cancelled"} {
		if r := s.get(t, "/v1/events?status="+status); r.status != 200 {
			t.Errorf("status=%s: %d %s", status, r.status, r.body)
		}
	}
	if r := s.get(t, "/v1/events?limit=500"); r.status != 200 {
		t.Errorf("limit=500: %d %s", r.status, r.body)
	}
}

// TestEventGet checks GET /v1/events/{id}: the event with its runs, each
// with its attempts oldest first. The attempts are made through the store
// as a worker makes them.
func TestEventGet(t *testing.T) {
	t.Parallel()
	s := evNewStack(t, "")
	ctx := t.Context()
	resource := "get/" + uuid.NewString()
	r := s.post(t, evBody("build", resource, 1, `{"ref":"main"}`))
	evWantStatus(t, r, http.StatusAccepted)
	eventID := r.json(t)["event"].(map[string]any)["id"].(string)
	runID := uuid.MustParse(r.json(t)["run"].(map[string]any)["id"].(string))

	get := func() map[string]any {
		t.Helper()
		r := s.get(t, "/v1/events/"+eventID)
		evWantStatus(t, r, 200)
		return r.json(t)
	}
	ev := get()
	runs, _ := ev["runs"].([]any)
	if len(runs) != 1 {
		t.Fatalf("runs %v, want one", ev["runs"])
	}
	run := runs[0].(map[string]any)
	if hist, ok := run["attempt_history"].([]any); !ok || len(hist) != 0 {
		t.Errorf("attempt_history of a queued run = %v, want []", run["attempt_history"])
	}

	// Attempt 1 fails transiently, attempt 2 succeeds.
	var jobID int64
	if err := s.pool.QueryRow(ctx, `SELECT job_id FROM converge_runs WHERE id = $1`, runID).Scan(&jobID); err != nil {
		t.Fatalf("job id: %v", err)
	}
	status := 503
	for i, callErr := range []*converge.Error{{Class: converge.ClassTransient, Message: "503 Service Unavailable", HTTPStatus: &status}, nil} {
		ticket, err := s.store.AttemptBegin(ctx, runID, jobID, time.Minute)
		if err != nil || ticket.Decision != converge.DecisionCall || ticket.Attempt != i+1 {
			t.Fatalf("AttemptBegin: %+v, %v", ticket, err)
		}
		_, err = s.store.AttemptFinish(ctx, store.AttemptFinishParams{
			Run: ticket.Run, Attempt: ticket.Attempt, Started: time.Now(), Err: callErr,
			Output: json.RawMessage(`{"artifact":"web@1"}`), Backoff: converge.Backoff{Initial: time.Millisecond, Max: time.Millisecond},
		})
		if err != nil {
			t.Fatalf("AttemptFinish: %v", err)
		}
	}

	ev = get()
	if ev["status"] != "succeeded" || ev["id"] != eventID || ev["resource"] != resource {
		t.Errorf("event %v", ev)
	}
	run = ev["runs"].([]any)[0].(map[string]any)
	if run["status"] != "succeeded" || run["attempts"] != float64(2) || run["finished_at"] == nil || run["started_at"] == nil {
		t.Errorf("run %v", run)
	}
	if out, _ := run["output"].(map[string]any); out["artifact"] != "web@1" {
		t.Errorf("output %v", run["output"])
	}
	hist := run["attempt_history"].([]any)
	if len(hist) != 2 {
		t.Fatalf("attempt_history %v, want 2 attempts", hist)
	}
	a1, a2 := hist[0].(map[string]any), hist[1].(map[string]any)
	if a1["number"] != float64(1) || a1["outcome"] != "transient_error" || a2["number"] != float64(2) || a2["outcome"] != "succeeded" {
		t.Errorf("attempts %v, %v", a1, a2)
	}
	if e, _ := a1["error"].(map[string]any); e["class"] != "transient" || e["http_status"] != float64(503) || e["message"] == "" {
		t.Errorf("attempt 1 error %v", a1["error"])
	}
	if a2["error"] != nil {
		t.Errorf("attempt 2 error %v", a2["error"])
	}
	for _, a := range []map[string]any{a1, a2} {
		for _, k := range []string{"number", "outcome", "started_at", "finished_at", "duration_ms", "error"} {
			if _, ok := a[k]; !ok {
				t.Errorf("attempt has no %q: %v", k, a)
			}
		}
		if d, ok := a["duration_ms"].(float64); !ok || d < 0 {
			t.Errorf("duration_ms %v", a["duration_ms"])
		}
	}

	for _, path := range []string{"/v1/events/" + uuid.NewString(), "/v1/events/not-a-uuid", "/v1/events/" + strings.Repeat("9", 300)} {
		evWantProblem(t, s.get(t, path), 404, "not-found")
	}
}

// TestEventAuth checks that /v1/events needs a valid bearer token.
func TestEventAuth(t *testing.T) {
	t.Parallel()
	s := evNewStack(t, "")
	secret, _, err := s.store.TokenCreate(t.Context(), "submitter-"+uuid.NewString(), converge.RoleSubmitter, converge.AuditEntry{Actor: "test", Role: "operator"})
	if err != nil {
		t.Fatalf("create token: %v", err)
	}
	body := func() io.Reader { return strings.NewReader(evBody("build", "auth/"+uuid.NewString(), 1, "")) }
	cases := []struct {
		name, method, auth string
		status             int
	}{
		{"post without token", http.MethodPost, "", 401},
		{"post with a bad token", http.MethodPost, "Bearer nope", 401},
		{"post with a basic auth", http.MethodPost, "Basic " + evAdminToken, 401},
		{"post with the token alone", http.MethodPost, evAdminToken, 401},
		{"post with an empty bearer", http.MethodPost, "Bearer ", 401},
		{"list without token", http.MethodGet, "", 401},
		{"list with a bad token", http.MethodGet, "Bearer " + evAdminToken + "x", 401},
		{"post with a stored token", http.MethodPost, "Bearer " + secret, 202},
		{"list with a stored token", http.MethodGet, "Bearer " + secret, 200},
		{"post with the admin token", http.MethodPost, "Bearer " + evAdminToken, 202},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var r *evResponse
			h := map[string]string{"Authorization": tc.auth, "Content-Type": "application/json"}
			if tc.method == http.MethodPost {
				r = s.do(t, tc.method, "/v1/events", body(), h)
			} else {
				r = s.do(t, tc.method, "/v1/events", nil, h)
			}
			if tc.status == 401 {
				evWantProblem(t, r, 401, "unauthorized")
				if r.header.Get("WWW-Authenticate") == "" {
					t.Error("401 without WWW-Authenticate")
				}
				return
			}
			evWantStatus(t, r, tc.status)
		})
	}
}

// TestEventCreateJSONMediaTypes: a body is JSON by its Content-Type when
// it is application/json, with parameters or not, or any
// application/*+json (as the OpenAPI document and SPEC §12 say).
func TestEventCreateJSONMediaTypes(t *testing.T) {
	t.Parallel()
	s := evNewStack(t, "")
	for i, ct := range []string{"application/json", "application/json; charset=utf-8", "application/vnd.api+json", "application/merge-patch+json"} {
		body := fmt.Sprintf(`{"kind":"build","resource":"media/%s","version":%d}`, uuid.NewString(), i+1)
		r := s.do(t, http.MethodPost, "/v1/events", strings.NewReader(body), map[string]string{"Content-Type": ct})
		if r.status != http.StatusAccepted {
			t.Errorf("Content-Type %q: %d %s, want 202", ct, r.status, r.body)
		}
	}
}
