package apicheck_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/converge-run/converge/test/cvproc"
	"github.com/converge-run/converge/test/pgtest"
)

// digest is every converge table's row count and a hash of its rows.
func digest(t *testing.T, conn *pgx.Conn) map[string]string {
	t.Helper()
	rows, err := conn.Query(t.Context(), `SELECT table_name FROM information_schema.tables
		WHERE table_schema = current_schema() AND table_name LIKE 'converge\_%' AND table_type = 'BASE TABLE'`)
	if err != nil {
		t.Fatal(err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, table := range tables {
		var d string
		q := fmt.Sprintf(`SELECT count(*)::text || ' ' || coalesce(md5(string_agg(t::text, ',' ORDER BY t::text)), '') FROM %s t`,
			pgx.Identifier{table}.Sanitize())
		if err := conn.QueryRow(t.Context(), q).Scan(&d); err != nil {
			t.Fatalf("digest %s: %v", table, err)
		}
		out[table] = d
	}
	return out
}

// TestHostileInputWritesNothing sends each hostile request the outside
// client run found (issue 21) to the real binary: every answer is a 4xx
// problem body that matches the document and shows no database text, and
// every converge table is the same afterwards, row for row.
func TestHostileInputWritesNothing(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewDatabase(t)
	cfgPath := filepath.Join(t.TempDir(), "converge.yaml")
	if err := os.WriteFile(cfgPath, []byte(scenarioConfig(dbURL, fakeTarget(t))), 0o600); err != nil {
		t.Fatal(err)
	}
	env := cvproc.Env("CONVERGE_CONFIG="+cfgPath, "CONVERGE_ADMIN_TOKEN="+adminToken, "APICHECK_HOOK_SECRET="+hookSecret, "DATABASE_URL="+dbURL)
	srv := cvproc.Start(t, cvproc.Options{Args: []string{"api"}, Env: env})
	base := srv.URL(t, time.Minute)
	v := newValidator(t, base)
	op := client{t: t, v: v, base: base, token: adminToken}
	// One event and its run, so that the actions have something to refuse.
	accepted := decode(t, op.json("POST", "/v1/events", `{"kind":"build","resource":"app/web","version":1}`))
	runID := str(accepted, "run", "id")

	conn, err := pgx.Connect(t.Context(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(t.Context()) })
	before := digest(t, conn)

	amplified := `{"kind":"build","resource":"amp","version":1,"payload":{` +
		strings.TrimSuffix(strings.Repeat(`"n":1e131071,`, 20), ",") + `}}`
	deep := `{"kind":"build","resource":"deep","version":1,"payload":` + strings.Repeat(`{"a":`, 5000) + "1" + strings.Repeat("}", 5000) + `}`
	cases := []struct {
		name, method, path, body string
		status                   int
	}{
		{"1e131071 twenty times", "POST", "/v1/events", amplified, 422},
		{"5000-deep payload", "POST", "/v1/events", deep, 422},
		{"65-deep payload", "POST", "/v1/events", `{"kind":"build","resource":"d65","version":1,"payload":` +
			strings.Repeat(`{"a":`, 65) + "1" + strings.Repeat("}", 65) + `}`, 422},
		{"NaN-like number", "POST", "/v1/events", `{"kind":"build","resource":"n","version":1,"payload":{"n":1e400}}`, 422},
		{"lone surrogate", "POST", "/v1/events", `{"kind":"build","resource":"s","version":1,"payload":{"s":"\ud800"}}`, 422},
		{"NUL in payload", "POST", "/v1/events", `{"kind":"build","resource":"z","version":1,"payload":{"s":"a\u0000"}}`, 422},
		{"NUL in resource", "POST", "/v1/events", `{"kind":"build","resource":"a\u0000","version":1}`, 422},
		{"version zero", "POST", "/v1/events", `{"kind":"build","resource":"v","version":0}`, 422},
		{"version past int64", "POST", "/v1/events", `{"kind":"build","resource":"v","version":9223372036854775808}`, 422},
		{"unknown field", "POST", "/v1/events", `{"kind":"build","resource":"u","version":1,"extra":1}`, 422},
		{"cancel reason with NUL", "POST", "/v1/runs/" + runID + "/cancel", `{"reason":"stop\u0000"}`, 422},
		{"cancel reason of 1001", "POST", "/v1/runs/" + runID + "/cancel", `{"reason":"` + strings.Repeat("é", 1001) + `"}`, 422},
		{"cancel reason not a string", "POST", "/v1/runs/" + runID + "/cancel", `{"reason":5}`, 422},
		{"bulk with ids and filter", "POST", "/v1/dead-letters/redrive", `{"ids":["` + runID + `"],"filter":{}}`, 422},
		{"bulk filter null", "POST", "/v1/dead-letters/discard", `{"filter":null}`, 422},
		{"bulk of 1001 ids", "POST", "/v1/dead-letters/discard", `{"ids":[` +
			strings.TrimSuffix(strings.Repeat(`"`+runID+`",`, 1001), ",") + `]}`, 422},
		{"purge of nonsense", "POST", "/v1/dead-letters/purge", `{"older_than":"-5h"}`, 422},
		{"workflow of a bad resource", "POST", "/v1/workflow-runs", `{"workflow":"release","resource":"../x","version":1}`, 422},
		{"empty limit", "GET", "/v1/events?limit=", "", 422},
		{"q of 201", "GET", "/v1/dead-letters?q=" + strings.Repeat("q", 201), "", 422},
		{"filter with NUL", "GET", "/v1/events?resource=a%00b", "", 422},
		{"cursor of garbage", "GET", "/v1/audit?cursor=AAAA", "", 422},
		{"GET on a POST route", "GET", "/v1/dead-letters/redrive", "", 405},
	}
	for _, c := range cases {
		e := op.json(c.method, c.path, c.body)
		if e.status != c.status {
			t.Errorf("%s: %d, want %d: %s", c.name, e.status, c.status, truncate(e.body, 200))
			continue
		}
		var p struct {
			Type, Detail string
		}
		if e.header.Get("Content-Type") != "application/problem+json" || json.Unmarshal(e.body, &p) != nil ||
			!strings.HasPrefix(p.Type, "urn:converge:problem:") {
			t.Errorf("%s: not a problem body: %s", c.name, truncate(e.body, 200))
		}
		for _, leak := range []string{"SQLSTATE", "ERROR:", "pgx", "jsonb", "violates"} {
			if strings.Contains(p.Detail, leak) {
				t.Errorf("%s: the detail shows database text %q: %s", c.name, leak, p.Detail)
			}
		}
		if c.status == 405 && e.header.Get("Allow") == "" {
			t.Errorf("%s: 405 without Allow", c.name)
		}
	}
	// A forged, oversized X-Request-Id is replaced, never recorded.
	forged := op.send("POST", "/v1/runs/"+runID+"/cancel", "application/json", []byte(`{"reason":"\u0000"}`),
		"X-Request-Id", strings.Repeat("f", 6<<10))
	// A generated id is a UUID, whose longest run of hex digits is 12: a run
	// of 16 f's can only be the forged value, or a piece of it, echoed back
	// (a plain "fff" also appears in a random UUID now and then).
	if got := forged.header.Get("X-Request-Id"); len(got) > 128 || strings.Contains(got, strings.Repeat("f", 16)) {
		t.Errorf("an oversized X-Request-Id came back as %q", truncate([]byte(got), 80))
	}

	after := digest(t, conn)
	for table, d := range before {
		if after[table] != d {
			t.Errorf("table %s changed: %s -> %s", table, d, after[table])
		}
	}
}
