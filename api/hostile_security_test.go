package api_test

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/converge-run/converge/api"
)

// secHostile are values an attacker or a broken client may send. Those with
// reject set are never acceptable in any parameter; the others may be
// legitimate in some (a search text, a resource key made of digits) and
// must then be handled as plain data.
var secHostile = []struct {
	name   string
	value  string
	reject bool
}{
	{name: "single quote", value: `'`},
	{name: "double quote", value: `"`},
	{name: "sql or", value: `' OR '1'='1`},
	{name: "sql comment", value: `x' OR 1=1 --`},
	{name: "sql drop", value: `x'); DROP TABLE converge_events; --`},
	{name: "sql union", value: `1 UNION SELECT hash FROM converge_tokens`},
	{name: "sql stacked", value: `1; DELETE FROM converge_runs`},
	{name: "like wildcards", value: `%_%`},
	{name: "backslash", value: `\`},
	{name: "regex", value: `.*(a+)+$`},
	{name: "json", value: `{"$ne":null}`},
	{name: "html", value: `<script>alert(1)</script>`},
	{name: "path traversal", value: `../../etc/passwd`},
	{name: "crlf", value: "a\r\nSet-Cookie: x=1"},
	{name: "10KB", value: strings.Repeat("a", 10<<10)},
	{name: "10KB quotes", value: strings.Repeat(`'"`, 5<<10)},
	{name: "huge number", value: "99999999999999999999999999999999"},
	{name: "max int64+1", value: "9223372036854775808"},
	{name: "min int64-1", value: "-9223372036854775809"},
	{name: "negative", value: "-1"},
	{name: "zero", value: "0"},
	{name: "float", value: "1e308"},
	{name: "nan", value: "NaN"},
	{name: "far-future time", value: "9999-12-31T23:59:59.999999999Z"},
	{name: "year zero", value: "0000-01-01T00:00:00Z"},
	{name: "unicode", value: "ü🙂\u202e"},
	{name: "invalid utf-8", value: "\xff\xfe", reject: true},
	{name: "overlong utf-8", value: "\xc0\xaf", reject: true},
	{name: "nul", value: "a\x00b", reject: true},
	{name: "only nul", value: "\x00", reject: true},
}

// secCraftedCursors are well-formed base64 cursors carrying extreme values,
// which decode fine and reach the database.
func secCraftedCursors() map[string]string {
	dl := func(micros uint64) string {
		b := make([]byte, 24)
		binary.BigEndian.PutUint64(b, micros)
		copy(b[8:], uuid.Max[:])
		return base64.RawURLEncoding.EncodeToString(b)
	}
	return map[string]string{
		"cursor of nil id":          api.EncodeCursor(uuid.Nil),
		"cursor of max id":          api.EncodeCursor(uuid.Max),
		"dead-letter min time":      dl(1 << 63),
		"dead-letter max time":      dl(1<<63 - 1),
		"dead-letter time -1":       dl(1<<64 - 1),
		"dead-letter cursor of 16":  base64.RawURLEncoding.EncodeToString(make([]byte, 16)),
		"event cursor of 24 bytes":  base64.RawURLEncoding.EncodeToString(make([]byte, 24)),
		"padded base64":             base64.URLEncoding.EncodeToString(make([]byte, 16)),
		"standard base64 alphabet":  base64.StdEncoding.EncodeToString([]byte{0xfb, 0xff, 0xbf, 0xfb, 0xff, 0xbf, 0xfb, 0xff, 0xbf, 0xfb, 0xff, 0xbf, 0xfb, 0xff, 0xbf, 0xff}),
		"non-canonical last digit":  strings.Repeat("A", 21) + "B",
		"cursor with trailing junk": api.EncodeCursor(uuid.Max) + "$",
	}
}

// secSnapshot returns a fingerprint of every table of the database: its
// row count and a hash of its rows (of converge_tokens only the count, as
// authenticating touches last_used_at).
func secSnapshot(t *testing.T, pool *pgxpool.Pool) map[string]string {
	t.Helper()
	rows, err := pool.Query(t.Context(), `SELECT table_name FROM information_schema.tables
		WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' ORDER BY table_name`)
	if err != nil {
		t.Fatalf("list tables: %v", err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(tables) == 0 {
		t.Fatalf("list tables: %v %v", tables, err)
	}
	snap := map[string]string{}
	for _, table := range tables {
		q := fmt.Sprintf(`SELECT count(*)::text || ' ' || coalesce(md5(string_agg(t::text, ',' ORDER BY t::text)), '') FROM %s t`,
			pgx.Identifier{table}.Sanitize())
		if table == "converge_tokens" {
			q = fmt.Sprintf(`SELECT count(*)::text FROM %s`, pgx.Identifier{table}.Sanitize())
		}
		var fp string
		if err := pool.QueryRow(t.Context(), q).Scan(&fp); err != nil {
			t.Fatalf("fingerprint %s: %v", table, err)
		}
		snap[table] = fp
	}
	return snap
}

// secHostileCase is one request of TestHostileInput.
type secHostileCase struct {
	name   string
	url    string // path and query, escaped
	reject bool   // must be a 4xx
}

// secHostileCases builds, for every GET route, requests with each hostile
// value in each of the route's query parameters, as an unknown parameter's
// name and value, and in each path parameter.
func secHostileCases(t *testing.T, s *secServer) []secHostileCase {
	t.Helper()
	var cases []secHostileCase
	fake := uuid.Must(uuid.NewV7())
	for _, route := range secV1Routes(t, s.Server) {
		method, pattern := secSplitRoute(route)
		if method != http.MethodGet {
			continue
		}
		spec, ok := secRouteTable[route]
		if !ok {
			t.Errorf("%s: not in secRouteTable", route)
			continue
		}
		path := secFillPath(pattern, fake)
		for _, h := range secHostile {
			for _, param := range spec.query {
				cases = append(cases, secHostileCase{
					name: route + " " + param + "=" + h.name, url: path + "?" + url.Values{param: {h.value}}.Encode(), reject: h.reject,
				})
			}
			// A route that takes query parameters refuses unknown ones;
			// the others ignore the query.
			lists := len(spec.query) > 0
			cases = append(cases,
				secHostileCase{name: route + " unknown=" + h.name, url: path + "?" + url.Values{"x": {h.value}}.Encode(), reject: lists},
				secHostileCase{name: route + " name " + h.name, url: path + "?" + url.Values{h.value: {"1"}}.Encode(), reject: lists},
			)
			// Each path parameter in turn.
			params := secPathParam.FindAllString(pattern, -1)
			if strings.HasSuffix(pattern, "*") {
				params = append(params, "*")
			}
			for _, param := range params {
				p := strings.Replace(pattern, param, url.PathEscape(h.value), 1)
				cases = append(cases, secHostileCase{
					name: route + " path " + param + "=" + h.name, url: secFillPath(p, fake),
					// A 10KB resource key is no resource; anything else in a
					// path is looked up and not found.
					reject: true,
				})
			}
		}
		for _, param := range spec.query {
			if param != "cursor" {
				continue
			}
			for name, c := range secCraftedCursors() {
				cases = append(cases, secHostileCase{name: route + " " + name, url: path + "?cursor=" + url.QueryEscape(c)})
			}
		}
		// Malformed query strings: a bad escape, a semicolon, repeats.
		for _, raw := range []string{"%", "%zz", "a=%", "limit=1;x=1", "limit=1&limit=2", "&&=&", "="} {
			cases = append(cases, secHostileCase{name: route + " raw " + raw, url: path + "?" + raw, reject: len(spec.query) > 0})
		}
		cases = append(cases, secHostileCase{name: route + " 10K ampersands", url: path + "?" + strings.Repeat("&", 10<<10)})
	}
	return cases
}

// TestHostileInput sends hostile strings in every query parameter and path
// parameter of every GET /v1 route, over a real connection, as an operator:
// every answer is a 2xx or a 4xx problem, never a 5xx; values that are
// never valid (invalid UTF-8, NUL) are always refused; and the database is
// the same afterwards, row for row.
func TestHostileInput(t *testing.T) {
	t.Parallel()
	s := newSecServer(t, secOptions{isolated: true})
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	auth := "Bearer " + s.tokens["operator"]

	// Something to find: an event, its run cancelled (an audit entry).
	w := s.do(t, http.MethodPost, "/v1/events", auth, strings.NewReader(`{"kind":"build","resource":"app/web","version":1,"payload":{"a":"b"}}`))
	if w.Code != http.StatusAccepted {
		t.Fatalf("accept = %d %s", w.Code, w.Body)
	}
	var accepted struct {
		Run struct {
			ID string `json:"id"`
		} `json:"run"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &accepted); err != nil {
		t.Fatal(err)
	}
	if w := s.do(t, http.MethodPost, "/v1/runs/"+accepted.Run.ID+"/cancel", auth, nil); w.Code != http.StatusOK {
		t.Fatalf("cancel = %d %s", w.Code, w.Body)
	}

	before := secSnapshot(t, s.pool)
	cases := secHostileCases(t, s)
	statuses := map[int]int{}
	for _, c := range cases {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+c.url, nil)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		req.Header.Set("Authorization", auth)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		statuses[resp.StatusCode]++
		ct := resp.Header.Get("Content-Type")
		switch {
		case resp.StatusCode >= 500:
			t.Errorf("%s: %d %s", c.name, resp.StatusCode, body)
		case resp.StatusCode >= 400:
			var p api.Problem
			if ct != "application/problem+json" || json.Unmarshal(body, &p) != nil ||
				!strings.HasPrefix(p.Type, "urn:converge:problem:") || p.Status != resp.StatusCode {
				t.Errorf("%s: %d with %s %q, want a problem body", c.name, resp.StatusCode, ct, body)
			}
		case c.reject:
			t.Errorf("%s: %d %.200s, want a 4xx", c.name, resp.StatusCode, body)
		case resp.StatusCode >= 200 && resp.StatusCode < 300:
			if ct != "application/json" || !json.Valid(body) {
				t.Errorf("%s: %d with %s %q, want JSON", c.name, resp.StatusCode, ct, body)
			}
		default:
			t.Errorf("%s: %d %.200s", c.name, resp.StatusCode, body)
		}
	}
	after := secSnapshot(t, s.pool)
	for table, fp := range before {
		if after[table] != fp {
			t.Errorf("table %s changed: %s → %s", table, fp, after[table])
		}
	}
	if len(after) != len(before) {
		t.Errorf("tables %v → %v", before, after)
	}
	t.Logf("%d hostile requests: statuses %v", len(cases), statuses)
}
