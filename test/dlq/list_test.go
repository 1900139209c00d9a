package dlq_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/store"
)

// listPage is the answer of GET /v1/dead-letters.
type listPage struct {
	Items      []*converge.DeadLetter `json:"items"`
	NextCursor *string                `json:"next_cursor"`
}

func (s *stack) list(t *testing.T, query string) listPage {
	t.Helper()
	r := s.do(t, s.viewer, http.MethodGet, "/v1/dead-letters?"+query, nil)
	want(t, r, http.StatusOK)
	var p listPage
	r.decode(t, &p)
	return p
}

func ids(items []*converge.DeadLetter) []uuid.UUID {
	out := make([]uuid.UUID, len(items))
	for i, d := range items {
		out[i] = d.ID
	}
	return out
}

func TestDeadLetterListFilters(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	d1 := s.deadLetter(t, "build", "app/web", 1, converge.ClassPermanent, "http status 404: no such image")
	d2 := s.deadLetter(t, "build", "app/web_x", 1, converge.ClassTransient, "dial tcp 10.0.0.1:443: Connection refused")
	d3 := s.deadLetter(t, "build", "app/webXx", 1, converge.ClassTransient, "http status 503: unavailable")
	d4 := s.deadLetter(t, "deploy", "prod/pay", 1, converge.ClassTransient, "100% cpu_load, timed out")
	d5 := s.deadLetter(t, "deploy", "prod/pay", 2, converge.ClassTransient, "cpuXload stalled")
	d6 := s.deadLetter(t, "deploy", "prod/db", 1, converge.ClassPermanent, "exit status 2")
	want(t, s.do(t, "", http.MethodPost, "/v1/dead-letters/"+d6.ID.String()+"/discard", nil), http.StatusOK)
	// Known creation times for since/until.
	ctx := context.WithoutCancel(t.Context())
	for id, at := range map[uuid.UUID]string{d1.ID: "2020-01-01T00:00:00Z", d2.ID: "2021-01-01T00:00:00Z"} {
		if _, err := s.pool.Exec(ctx, `UPDATE converge_dead_letters SET created_at = $2 WHERE id = $1`, id, at); err != nil {
			t.Fatal(err)
		}
	}

	cases := []struct {
		query string
		want  []uuid.UUID // newest first
	}{
		{"", []uuid.UUID{d5.ID, d4.ID, d3.ID, d2.ID, d1.ID}},
		{"status=open", []uuid.UUID{d5.ID, d4.ID, d3.ID, d2.ID, d1.ID}},
		{"status=discarded", []uuid.UUID{d6.ID}},
		{"status=redriven", nil},
		{"status=superseded", nil},
		{"kind=deploy", []uuid.UUID{d5.ID, d4.ID}},
		{"kind=nope", nil},
		{"resource=app/web", []uuid.UUID{d3.ID, d2.ID, d1.ID}},
		{"resource=app/web_", []uuid.UUID{d2.ID}}, // _ is not a wildcard
		{"resource=prod/pay", []uuid.UUID{d5.ID, d4.ID}},
		{"resource=prod/payx", nil},
		{"reason=permanent_error", []uuid.UUID{d1.ID}},
		{"reason=attempts_exhausted", []uuid.UUID{d5.ID, d4.ID, d3.ID, d2.ID}},
		{"q=CONNECTION", []uuid.UUID{d2.ID}}, // case-insensitive
		{"q=100%25", []uuid.UUID{d4.ID}},     // % is not a wildcard
		{"q=u_l", []uuid.UUID{d4.ID}},        // nor is _
		{"q=http+status", []uuid.UUID{d3.ID, d1.ID}},
		{"since=2020-06-01T00:00:00Z&until=2021-06-01T00:00:00Z", []uuid.UUID{d2.ID}},
		{"since=2021-01-01T00:00:00Z&until=2021-01-01T00:00:00Z", []uuid.UUID{d2.ID}}, // both bounds inclusive
		{"until=2020-12-31T23:59:59Z", []uuid.UUID{d1.ID}},
		{"until=2021-01-01T01:00:00%2B02:00", []uuid.UUID{d1.ID}}, // an offset is honoured
		{"since=2022-01-01T00:00:00Z", []uuid.UUID{d5.ID, d4.ID, d3.ID}},
		{"kind=build&reason=attempts_exhausted&resource=app/", []uuid.UUID{d3.ID, d2.ID}},
		{"kind=build&resource=app/&q=http&since=2019-01-01T00:00:00.5Z", []uuid.UUID{d3.ID, d1.ID}},
		{"status=discarded&kind=deploy&reason=permanent_error&resource=prod/d&q=exit", []uuid.UUID{d6.ID}},
	}
	for _, c := range cases {
		t.Run(c.query, func(t *testing.T) {
			got := ids(s.list(t, c.query).Items)
			if !slices.Equal(got, c.want) && !(len(got) == 0 && len(c.want) == 0) {
				t.Fatalf("got %v, want %v", got, c.want)
			}
		})
	}
}

func TestDeadLetterShape(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	res := s.accept(t, "build", "app/shape", 7, 3)
	s.fail(t, res.Run.ID, converge.ClassTransient, "first: 503")
	s.fail(t, res.Run.ID, converge.ClassTransient, "second: 502")
	if st := s.fail(t, res.Run.ID, converge.ClassTransient, "third: timeout"); st != converge.RunFailed {
		t.Fatalf("status %s, want failed", st)
	}
	d := s.deadLetterOf(t, res.Run.ID)

	r := s.do(t, s.viewer, http.MethodGet, "/v1/dead-letters/"+d.ID.String(), nil)
	want(t, r, http.StatusOK)
	var m map[string]json.RawMessage
	r.decode(t, &m)
	for _, k := range []string{"id", "event_id", "run_id", "kind", "resource", "version", "reason", "attempts",
		"error", "errors", "payload", "status", "created_at", "resolved_at", "resolved_by"} {
		if _, ok := m[k]; !ok {
			t.Errorf("field %s missing: %s", k, r.body)
		}
	}
	if _, ok := m["superseded_by_version"]; ok {
		t.Errorf("superseded_by_version present on an open dead letter: %s", r.body)
	}
	var got converge.DeadLetter
	r.decode(t, &got)
	if got.EventID != res.Event.ID || got.RunID != res.Run.ID || got.Kind != "build" || got.Resource != "app/shape" ||
		got.Version != 7 || got.Reason != converge.ReasonAttemptsExhausted || got.Attempts != 3 ||
		got.Status != converge.DeadLetterOpen || got.ResolvedAt != nil || got.ResolvedBy != nil {
		t.Fatalf("dead letter %s", r.body)
	}
	if got.Error == nil || got.Error.Message != "third: timeout" || got.Error.Class != converge.ClassTransient {
		t.Fatalf("error %+v, want the last", got.Error)
	}
	var msgs []string
	for _, e := range got.Errors {
		msgs = append(msgs, e.Message)
	}
	if !slices.Equal(msgs, []string{"first: 503", "second: 502", "third: timeout"}) {
		t.Fatalf("errors %v, want every attempt's, oldest first", msgs)
	}
	var payload map[string]any
	if err := json.Unmarshal(got.Payload, &payload); err != nil || payload["resource"] != "app/shape" {
		t.Fatalf("payload %s", got.Payload)
	}
	if !strings.HasSuffix(string(m["created_at"]), `Z"`) {
		t.Fatalf("created_at %s is not UTC", m["created_at"])
	}

	// q matches the text of any attempt's error, not only the last.
	for _, q := range []string{"502", "FIRST", "timeout"} {
		if p := s.list(t, "q="+q); len(p.Items) != 1 || p.Items[0].ID != d.ID {
			t.Fatalf("q=%s: %v", q, ids(p.Items))
		}
	}
	if p := s.list(t, "q=fourth"); len(p.Items) != 0 {
		t.Fatalf("q=fourth: %v", ids(p.Items))
	}

	wantProblem(t, s.do(t, s.viewer, http.MethodGet, "/v1/dead-letters/"+uuid.NewString(), nil), http.StatusNotFound, "not-found")
	wantProblem(t, s.do(t, s.viewer, http.MethodGet, "/v1/dead-letters/nope", nil), http.StatusNotFound, "not-found")
}

func TestDeadLetterListPagination(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	var all []uuid.UUID
	for i := range 7 {
		kind := "build"
		if i%2 == 1 {
			kind = "deploy"
		}
		d := s.deadLetter(t, kind, "app/page-"+string(rune('a'+i)), 1, converge.ClassPermanent, "boom")
		all = append([]uuid.UUID{d.ID}, all...)
	}
	// Two share a creation time: the id breaks the tie.
	if _, err := s.pool.Exec(context.WithoutCancel(t.Context()), `UPDATE converge_dead_letters SET created_at = (SELECT created_at FROM converge_dead_letters WHERE id = $1) WHERE id = $2`, all[2], all[3]); err != nil {
		t.Fatal(err)
	}
	if all[2].String() < all[3].String() {
		t.Fatal("ids are not time-ordered")
	}
	for _, c := range []struct {
		filter string
		want   []uuid.UUID
	}{
		{"", all},
		{"kind=build", []uuid.UUID{all[0], all[2], all[4], all[6]}},
	} {
		for _, limit := range []string{"1", "2", "3", "500"} {
			var got []uuid.UUID
			seen := map[uuid.UUID]bool{}
			cursor := ""
			for pages := 0; ; pages++ {
				if pages > len(all) {
					t.Fatal("pagination does not end")
				}
				q := url.Values{"limit": {limit}}
				if cursor != "" {
					q.Set("cursor", cursor)
				}
				if c.filter != "" {
					f, _ := url.ParseQuery(c.filter)
					for k, v := range f {
						q[k] = v
					}
				}
				p := s.list(t, q.Encode())
				for _, d := range p.Items {
					if seen[d.ID] {
						t.Fatalf("filter %q limit %s: %s on two pages", c.filter, limit, d.ID)
					}
					seen[d.ID] = true
					got = append(got, d.ID)
				}
				if p.NextCursor == nil {
					break
				}
				if len(p.Items) == 0 {
					t.Fatal("an empty page with a next cursor")
				}
				cursor = *p.NextCursor
			}
			if !slices.Equal(got, c.want) {
				t.Fatalf("filter %q limit %s: got %v, want %v", c.filter, limit, got, c.want)
			}
		}
	}
	// A full last page still says there is no more.
	if p := s.list(t, "limit=7"); len(p.Items) != 7 || p.NextCursor != nil {
		t.Fatalf("limit=7: %d items, next %v", len(p.Items), p.NextCursor)
	}
	if p := s.list(t, ""); len(p.Items) != 7 || p.NextCursor != nil {
		t.Fatalf("default limit: %d items", len(p.Items))
	}
}

func TestDeadLetterListBadFilters(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	s.deadLetter(t, "build", "app/bad", 1, converge.ClassPermanent, "boom")
	cases := []struct {
		query string
		field string
	}{
		{"status=closed", "status"},
		{"status=OPEN", "status"},
		{"status=open&status=discarded", "status"},
		{"reason=timeout", "reason"},
		{"reason=permanent", "reason"},
		{"since=yesterday", "since"},
		{"since=2024-01-01", "since"},
		{"until=2024-01-01T00:00:00", "until"},
		{"until=1700000000", "until"},
		{"since=2024-02-01T00:00:00Z&until=2024-01-01T00:00:00Z", "until"},
		{"limit=0", "limit"},
		{"limit=501", "limit"},
		{"limit=ten", "limit"},
		{"limit=-1", "limit"},
		{"cursor=garbage!", "cursor"},
		{"cursor=" + store.TokenPrefix, "cursor"},
		{"cursor=AAAAAAAAAAAAAAAAAAAAAA", "cursor"}, // a uuid-sized cursor of another list
		{"q=" + strings.Repeat("x", 201), "q"},
		{"resource=-app", "resource"},
		{"resource=app%20web", "resource"},
		{"kind=Build!", "kind"},
		{"colour=red", "colour"},
	}
	for _, c := range cases {
		t.Run(c.query, func(t *testing.T) {
			p := wantProblem(t, s.do(t, s.viewer, http.MethodGet, "/v1/dead-letters?"+c.query, nil), http.StatusUnprocessableEntity, "invalid-request")
			if !slices.ContainsFunc(p.Errors, func(e converge.FieldError) bool { return e.Field == c.field && e.Message != "" }) {
				t.Fatalf("errors %+v do not name %s", p.Errors, c.field)
			}
		})
	}
}

func TestDeadLetterRoles(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	d := s.deadLetter(t, "build", "app/roles", 1, converge.ClassPermanent, "boom")
	submitter, _, err := s.store.TokenCreate(t.Context(), "submitter-1", converge.RoleSubmitter, converge.AuditEntry{Actor: "test", Role: "operator"})
	if err != nil {
		t.Fatal(err)
	}
	id := d.ID.String()
	reads := []string{"/v1/dead-letters", "/v1/dead-letters/" + id}
	writes := []struct{ path, body string }{
		{"/v1/dead-letters/" + id + "/redrive", ""},
		{"/v1/dead-letters/" + id + "/discard", ""},
		{"/v1/dead-letters/redrive", `{"ids": ["` + id + `"]}`},
		{"/v1/dead-letters/discard", `{"ids": ["` + id + `"]}`},
		{"/v1/dead-letters/purge", `{"older_than": "0s"}`},
	}
	for _, p := range reads {
		wantProblem(t, s.do(t, submitter, http.MethodGet, p, nil), http.StatusForbidden, "forbidden")
		wantProblem(t, s.do(t, "not-a-token", http.MethodGet, p, nil), http.StatusUnauthorized, "unauthorized")
		want(t, s.do(t, s.viewer, http.MethodGet, p, nil), http.StatusOK)
	}
	for _, w := range writes {
		for _, tok := range []string{submitter, s.viewer} {
			wantProblem(t, s.do(t, tok, http.MethodPost, w.path, w.body), http.StatusForbidden, "forbidden")
		}
		wantProblem(t, s.do(t, "not-a-token", http.MethodPost, w.path, w.body), http.StatusUnauthorized, "unauthorized")
	}
	if got, _ := s.store.DeadLetterGet(t.Context(), d.ID); got.Status != converge.DeadLetterOpen {
		t.Fatalf("status %s after refused actions", got.Status)
	}
	if n := s.count(t, `SELECT count(*) FROM converge_audit WHERE action LIKE 'dead_letter.%'`); n != 0 {
		t.Fatalf("%d audit entries after refused actions", n)
	}
}
