package dlq_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/store"
)

// TestExplainAtScale prints the plan and timing of the dead-letter list for
// each filter combination, on a database filled by
// `converge bench dlq --events 1000000 --keep`. It runs only when DLQ_EXPLAIN_URL names such
// a database; docs/dead-letters.md holds its output.
func TestExplainAtScale(t *testing.T) {
	url := os.Getenv("DLQ_EXPLAIN_URL")
	if url == "" {
		t.Skip("set DLQ_EXPLAIN_URL to a database kept by converge bench dlq --events 1000000 --keep")
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var newest time.Time
	if err := conn.QueryRow(ctx, `SELECT max(created_at) FROM converge_dead_letters`).Scan(&newest); err != nil {
		t.Fatal(err)
	}
	at := func(d time.Duration) *time.Time { v := newest.Add(-d); return &v }
	day := 24 * time.Hour
	var deep converge.DeadLetterCursor
	if err := conn.QueryRow(ctx, `SELECT created_at, id FROM converge_dead_letters WHERE status = 'open'
		ORDER BY created_at DESC, id DESC OFFSET 100000 LIMIT 1`).Scan(&deep.CreatedAt, &deep.ID); err != nil {
		t.Fatal(err)
	}
	type F = converge.DeadLetterFilter
	cases := []struct {
		name   string
		f      F
		cursor *converge.DeadLetterCursor
	}{
		{"status=open (default)", F{}, nil},
		{"status=discarded", F{Status: "discarded"}, nil},
		{"open, page at row 100,000 (cursor)", F{}, &deep},
		{"kind=build", F{Kind: "build"}, nil},
		{"kind=test (5%)", F{Kind: "test"}, nil},
		{"reason=permanent_error", F{Reason: "permanent_error"}, nil},
		{"kind=test reason=permanent_error", F{Kind: "test", Reason: "permanent_error"}, nil},
		{"resource=prod/ (20%)", F{Resource: "prod/"}, nil},
		{"resource=prod/svc-19999 (one stream, rare)", F{Resource: "prod/svc-19999"}, nil},
		{"resource=app/svc-0000 (common streams)", F{Resource: "app/svc-0000"}, nil},
		{"kind=deploy resource=prod/svc-0001", F{Kind: "deploy", Resource: "prod/svc-0001"}, nil},
		{"q=connection refused (25%)", F{Q: "connection refused"}, nil},
		{"q=certificate has expired (0.1%)", F{Q: "certificate has expired"}, nil},
		{"q=x50 (3 characters, 0.1%)", F{Q: "x50"}, nil},
		{"q=no such text", F{Q: "no such text anywhere"}, nil},
		{"since=24h ago", F{Since: at(day)}, nil},
		{"until=60 days ago", F{Until: at(60 * day)}, nil},
		{"since..until one day, 45 days ago", F{Since: at(46 * day), Until: at(45 * day)}, nil},
		{"q=certificate since=7d", F{Q: "certificate", Since: at(7 * day)}, nil},
		{"reason=permanent_error q=manifest", F{Reason: "permanent_error", Q: "manifest"}, nil},
		{"resource=prod/ q=certificate", F{Resource: "prod/", Q: "certificate"}, nil},
		{"kind=test resource=prod/svc-1 reason=permanent_error", F{Kind: "test", Resource: "prod/svc-1", Reason: "permanent_error"}, nil},
		{"resource=staging/ kind=test reason=permanent_error until=85d", F{Resource: "staging/", Kind: "test", Reason: "permanent_error", Until: at(85 * day)}, nil},
		{"q=refused kind=test resource=prod/svc-19999", F{Q: "refused", Kind: "test", Resource: "prod/svc-19999"}, nil},
		{"superseded since=89d until=88d resource=app/", F{Status: "superseded", Since: at(89 * day), Until: at(88 * day), Resource: "app/"}, nil},
		{"all filters", F{Kind: "build", Resource: "prod/", Reason: "attempts_exhausted", Q: "refused", Since: at(30 * day), Until: at(day)}, nil},
		{"discarded kind=test until=80d q=certificate", F{Status: "discarded", Kind: "test", Until: at(80 * day), Q: "certificate"}, nil},
	}
	var summary strings.Builder
	fmt.Fprintf(&summary, "| filters | rows | median ms | max ms | plan |\n|---|---|---|---|---|\n")
	for _, c := range cases {
		p := &converge.DeadLetterListParams{DeadLetterFilter: c.f, Cursor: c.cursor, Limit: 50}
		sql, args := store.DeadLetterListSQL(p)
		rows, err := conn.Query(ctx, "EXPLAIN (ANALYZE, BUFFERS) "+sql, append([]any{pgx.QueryExecModeExec}, args...)...)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var times []float64
		var n int
		for range 7 {
			start := time.Now()
			rows, err := conn.Query(ctx, sql, append([]any{pgx.QueryExecModeExec}, args...)...)
			if err != nil {
				t.Fatal(err)
			}
			n = 0
			for rows.Next() {
				n++
			}
			rows.Close()
			times = append(times, float64(time.Since(start).Microseconds())/1000)
		}
		slices.Sort(times)
		fmt.Printf("### %s\n\n```\n%s\n```\n\n", c.name, strings.Join(lines, "\n"))
		fmt.Fprintf(&summary, "| %s | %d | %.1f | %.1f | %s |\n", c.name, n, times[len(times)/2], times[len(times)-1], planShape(lines))
	}
	fmt.Println(summary.String())
}

// planShape names the scan nodes of a plan.
func planShape(lines []string) string {
	var nodes []string
	for _, l := range lines {
		l = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "->"))
		for _, k := range []string{"Index Scan", "Index Only Scan", "Bitmap Index Scan", "Seq Scan", "Sort", "BitmapAnd"} {
			if strings.HasPrefix(l, k) {
				if i := strings.Index(l, "  ("); i > 0 {
					l = l[:i]
				}
				nodes = append(nodes, strings.ReplaceAll(l, "converge_dead_letters_", ""))
			}
		}
	}
	return strings.Join(nodes, " → ")
}
