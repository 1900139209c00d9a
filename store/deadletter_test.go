package store

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/test/pgtest"
)

// deadLetterWalkRows inserts the dead letters TestDeadLetterListWalk
// lists: g = 1 (newest) .. 6000, two per minute (so that created_at
// ties are ordered by id). Every tenth is discarded, the others open;
// kind test every 20th, deploy every 3rd, else build; resource rare/x for
// every 50th (+17) of the oldest thousand only, prod/svc-N every 50th (+7),
// else app/svc-NNN; reason permanent_error every 7th; error text
// "certificate has expired" every 250th (+17, rare), "connection refused"
// every 4th (+1, common), "manifest" every 9th (+2), else unique.
const deadLetterWalkRows = `INSERT INTO converge_dead_letters (id, event_id, run_id, kind, resource, version, reason, attempts,
	error, errors, error_text, payload, status, created_at)
SELECT md5('id' || g)::uuid, md5('event' || g)::uuid, md5('run' || g)::uuid,
	CASE WHEN g % 20 = 0 THEN 'test' WHEN g % 3 = 0 THEN 'deploy' ELSE 'build' END,
	CASE WHEN g > 5000 AND g % 50 = 17 THEN 'rare/x' WHEN g % 50 = 7 THEN 'prod/svc-' || g % 5
		ELSE 'app/svc-' || lpad((g % 200)::text, 3, '0') END,
	g, CASE WHEN g % 7 = 0 THEN 'permanent_error' ELSE 'attempts_exhausted' END, 1,
	jsonb_build_object('class', 'transient', 'message', msg), '[]', msg, '{}',
	CASE WHEN g % 10 = 0 THEN 'discarded' ELSE 'open' END,
	timestamptz '2030-01-01 00:00:00+00' - (g / 2) * interval '1 minute'
FROM (SELECT g, CASE WHEN g % 250 = 17 THEN 'x509: certificate has expired or is not yet valid'
		WHEN g % 4 = 1 THEN 'dial tcp 10.0.0.1:443: connect: connection refused'
		WHEN g % 9 = 2 THEN 'exit status 2: manifest invalid: field x is not allowed'
		ELSE 'http status 503: upstream ' || md5(g::text) END AS msg
	FROM generate_series(1, 6000) AS g) AS t`

// TestDeadLetterListWalk checks that the list of a q with other filters
// (deadLetterWalk: a bounded walk in list order, then reading on without
// the trigram index, or the ordinary query) returns exactly the rows a
// plain query returns, page after page, whichever way finds them: common
// and rare q, with kind, resource, reason and time filters, from the first
// page and from cursors deep in the list, and for a bulk action.
func TestDeadLetterListWalk(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.OpenPool(t, pgtest.NewDatabase(t), 2)
	for _, sql := range []string{
		// The generated rows have no events or runs.
		`ALTER TABLE converge_dead_letters DROP CONSTRAINT IF EXISTS converge_dead_letters_event_id_fkey`,
		`ALTER TABLE converge_dead_letters DROP CONSTRAINT IF EXISTS converge_dead_letters_run_id_fkey`,
		deadLetterWalkRows,
		`ANALYZE converge_dead_letters`,
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", strings.SplitN(sql, "\n", 2)[0], err)
		}
	}
	st := New(pool, nil) // lists only: enqueues nothing
	at := func(minutes int) *time.Time {
		v := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).Add(-time.Duration(minutes) * time.Minute)
		return &v
	}
	// With a page of 5, the walk keeps 6 matches and reads at most 500
	// rows. way is how the first page is expected to be found (-1: not
	// checked).
	type F = converge.DeadLetterFilter
	cases := []struct {
		name string
		f    F
		way  int
	}{
		{"kind, common q: the walk fills the page", F{Kind: "build", Q: "connection refused"}, walkDone},
		{"kind, reason, common q", F{Kind: "deploy", Reason: "attempts_exhausted", Q: "refused"}, walkDone},
		{"one hour, rare q: the walk reads every row", F{Kind: "build", Since: at(60), Q: "certificate"}, walkDone},
		{"rare resource, common q: its own index", F{Resource: "rare/", Q: "connection refused"}, walkOn},
		{"rare resource, rare q", F{Resource: "rare/", Q: "certificate has expired"}, walkOn},
		{"resource, reason, rare q: the trigram index", F{Resource: "app/", Reason: "permanent_error", Q: "certificate has expired"}, walkTrigram},
		{"kind, rare q", F{Kind: "build", Q: "CERTIFICATE"}, walkTrigram},
		{"until, rare q", F{Until: at(600), Q: "certificate"}, walkTrigram},
		{"q alone: no walk", F{Q: "connection refused"}, walkNone},
		{"reason, manifest", F{Reason: "permanent_error", Q: "manifest"}, -1},
		{"resource, reason, manifest", F{Resource: "app/svc-1", Reason: "permanent_error", Q: "manifest"}, -1},
		{"resource, common q", F{Resource: "prod/", Q: "connection refused"}, -1},
		{"discarded, resource, manifest", F{Status: converge.DeadLetterDiscarded, Resource: "app/", Q: "manifest"}, -1},
		{"discarded, kind, since..until, manifest", F{Status: converge.DeadLetterDiscarded, Kind: "build", Since: at(2000), Until: at(500), Q: "manifest"}, -1},
		{"all filters", F{Kind: "build", Resource: "app/", Reason: "attempts_exhausted", Since: at(2900), Until: at(100), Q: "refused"}, -1},
		{"no match", F{Kind: "test", Q: "no such text anywhere"}, -1},
		{"_ is not a wildcard", F{Kind: "build", Q: "509_ cert"}, -1},
	}
	seen := map[int]bool{}
	for _, c := range cases {
		want := deadLetterReference(t, pool, &c.f)
		if len(want) == 0 && c.f.Q != "no such text anywhere" && c.f.Q != "509_ cert" {
			t.Fatalf("%s: the generated rows have no match", c.name)
		}
		// The first page, a page from each of a few cursors, then every page.
		starts := []int{-1}
		for _, i := range []int{4, len(want) / 3, len(want) / 2, len(want) - 7} {
			if i >= 0 && i < len(want) {
				starts = append(starts, i)
			}
		}
		for _, start := range starts {
			var cursor *converge.DeadLetterCursor
			if start >= 0 {
				cursor = &converge.DeadLetterCursor{CreatedAt: want[start].at, ID: want[start].id}
			}
			rest := want[start+1:]
			ids, way, err := deadLetterQuery(ctx, pool, "d.id", scanID, &c.f, cursor, 6)
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			seen[way] = true
			if start < 0 && c.way >= 0 && way != c.way {
				t.Errorf("%s: found by way %d, want %d", c.name, way, c.way)
			}
			if want := referenceIDs(rest[:min(6, len(rest))]); !slices.Equal(ids, want) {
				t.Errorf("%s, after row %d (way %d): got %v, want %v", c.name, start, way, ids, want)
			}
			items, next, err := st.DeadLetterList(ctx, &converge.DeadLetterListParams{DeadLetterFilter: c.f, Cursor: cursor, Limit: 5})
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			if got, want := deadLetterIDs(items), referenceIDs(rest[:min(5, len(rest))]); !slices.Equal(got, want) {
				t.Errorf("%s, after row %d: got %v, want %v", c.name, start, got, want)
			}
			if (next != nil) != (len(rest) > 5) {
				t.Errorf("%s, after row %d: next cursor %v with %d rows left", c.name, start, next, len(rest))
			}
		}
		var all []*converge.DeadLetter
		var cursor *converge.DeadLetterCursor
		for page := 0; ; page++ {
			if page > 2000 {
				t.Fatalf("%s: too many pages", c.name)
			}
			items, next, err := st.DeadLetterList(ctx, &converge.DeadLetterListParams{DeadLetterFilter: c.f, Cursor: cursor, Limit: 5})
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			all = append(all, items...)
			if next == nil {
				break
			}
			cursor = next
		}
		if got, want := deadLetterIDs(all), referenceIDs(want); !slices.Equal(got, want) {
			t.Errorf("%s, every page: got %d rows, want %d", c.name, len(got), len(want))
		}

		// A bulk action by filter selects with the same query (1001 rows).
		res, err := st.DeadLetterDiscardMany(ctx, DeadLetterBulkParams{Filter: &c.f, DryRun: true})
		if err != nil {
			t.Fatalf("%s: bulk: %v", c.name, err)
		}
		var got []uuid.UUID
		got = append(got, res.Done...)
		for _, sk := range res.Skipped {
			got = append(got, sk.ID)
		}
		wantBulk := referenceIDs(want[:min(converge.MaxDeadLetterBulk, len(want))])
		slices.SortFunc(got, func(a, b uuid.UUID) int { return strings.Compare(a.String(), b.String()) })
		slices.SortFunc(wantBulk, func(a, b uuid.UUID) int { return strings.Compare(a.String(), b.String()) })
		if !slices.Equal(got, wantBulk) || res.More != (len(want) > converge.MaxDeadLetterBulk) {
			t.Errorf("%s: bulk selected %d (more %v), want %d of %d", c.name, len(got), res.More, len(wantBulk), len(want))
		}
	}
	for _, way := range []int{walkNone, walkDone, walkOn, walkTrigram} {
		if !seen[way] {
			t.Errorf("no page was found by way %d", way)
		}
	}
}

type referenceRow struct {
	id uuid.UUID
	at time.Time
}

// deadLetterReference returns every dead letter that f selects, newest
// first, by a query written independently of the store's.
func deadLetterReference(t *testing.T, pool *pgxpool.Pool, f *converge.DeadLetterFilter) []referenceRow {
	t.Helper()
	status := f.Status
	if status == "" {
		status = converge.DeadLetterOpen
	}
	rows, err := pool.Query(t.Context(), `SELECT id, created_at FROM converge_dead_letters
		WHERE status = $1 AND ($2 = '' OR kind = $2) AND starts_with(resource, $3) AND ($4 = '' OR reason = $4)
			AND strpos(lower(error_text), lower($5)) > 0
			AND created_at >= coalesce($6::timestamptz, '-infinity') AND created_at <= coalesce($7::timestamptz, 'infinity')
		ORDER BY created_at DESC, id DESC`,
		string(status), f.Kind, f.Resource, string(f.Reason), f.Q, f.Since, f.Until)
	if err != nil {
		t.Fatalf("reference: %v", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (referenceRow, error) {
		var x referenceRow
		return x, r.Scan(&x.id, &x.at)
	})
	if err != nil {
		t.Fatalf("reference: %v", err)
	}
	return out
}

func scanID(row pgx.Row, extra ...any) (uuid.UUID, error) {
	var id uuid.UUID
	return id, row.Scan(append([]any{&id}, extra...)...)
}

func deadLetterIDs(items []*converge.DeadLetter) []uuid.UUID {
	out := make([]uuid.UUID, len(items))
	for i, d := range items {
		out[i] = d.ID
	}
	return out
}

func referenceIDs(rows []referenceRow) []uuid.UUID {
	out := make([]uuid.UUID, len(rows))
	for i, r := range rows {
		out[i] = r.id
	}
	return out
}

// TestDeadLetterWalkNext checks the choice after a walk that did not fill
// the page, with the counts of shapes measured at a million rows (a page
// of 51, a walk of 510 rows; docs/benchmarks.md).
func TestDeadLetterWalkNext(t *testing.T) {
	w := &deadLetterWalk{limitN: 51, budget: 510}
	cases := []struct {
		name                  string
		hits, q, rest, narrow int64
		// rows is how many rows the walk's conditions select: open dead
		// letters of 90 days, or of one day.
		rows float64
		want int
	}{
		// kind=build q=certificate has expired (0.1 %).
		{"rare q", 0, 1, 510, 510, 250e3, walkTrigram},
		// resource=prod/svc-19999: no walked row is in the resource.
		{"rare resource", 0, 0, 0, 0, 250e3, walkOn},
		// resource=app/svc-0000 (1 %) q=connection refused (25 %): the
		// resource's index reads 3,000 rows, the trigram index 250,000
		// entries.
		{"narrow resource, common q", 2, 128, 6, 6, 250e3, walkOn},
		// resource=app/svc-0000 q=certificate has expired.
		{"narrow resource, rare q", 0, 0, 6, 6, 250e3, walkTrigram},
		// resource=prod/ reason=permanent_error q=connection refused: 0.75 %
		// of the walked rows match; 6,000 more rows to read against 250,000
		// entries.
		{"wide filters, common q", 4, 128, 15, 77, 250e3, walkOn},
		// resource=staging/svc-1 reason=permanent_error q=manifest: 0.13 %
		// match; 22,000 rows of the resource against 100,000 entries.
		{"wide filters, q of 10 %", 1, 51, 7, 45, 250e3, walkTrigram},
		{"wide filters, q of 10 %, more found", 3, 51, 7, 45, 250e3, walkTrigram},
		// The same over one day: 3,400 rows are left to read.
		{"one day, wide filters, q of 10 %", 1, 51, 7, 45, 3.9e3, walkOn},
	}
	first := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range cases {
		// The walk's 510 rows span 510/rows of 90 days.
		days := 90 * 24 * time.Hour
		last := &walkRow{n: 510, hits: c.hits, q: c.q, rest: c.rest, narrow: c.narrow, table: 1e6,
			first: first, at: first.Add(-time.Duration(float64(days) * 510 / c.rows)), oldest: first.Add(-days)}
		if got := w.next(int(c.hits), last); got != c.want {
			t.Errorf("%s: way %d, want %d", c.name, got, c.want)
		}
	}
	if got := w.next(51, &walkRow{n: 510, hits: 51, q: 51, rest: 510, narrow: 510, table: 1e6}); got != walkDone {
		t.Errorf("a full page: way %d, want %d", got, walkDone)
	}
	if got := w.next(3, nil); got != walkDone {
		t.Errorf("every row read: way %d, want %d", got, walkDone)
	}
}

// TestDedupe checks that dedupe keeps the first occurrence of each id in
// its place and drops the repeats, and that it is not quadratic: 200,000
// ids, half of them repeats, take far less than 5 s even on a loaded
// machine (the slices.Contains version made about 10¹⁰ comparisons).
func TestDedupe(t *testing.T) {
	t.Parallel()
	a, b, c := uuid.New(), uuid.New(), uuid.New()
	cases := []struct {
		name     string
		in, want []uuid.UUID
	}{
		{"nil", nil, nil},
		{"empty", []uuid.UUID{}, []uuid.UUID{}},
		{"one", []uuid.UUID{a}, []uuid.UUID{a}},
		{"no repeats", []uuid.UUID{c, a, b}, []uuid.UUID{c, a, b}},
		{"repeats keep the first place", []uuid.UUID{b, a, b, c, a, a, b}, []uuid.UUID{b, a, c}},
		{"all the same", []uuid.UUID{a, a, a}, []uuid.UUID{a}},
	}
	for _, c := range cases {
		got := dedupe(c.in)
		if !slices.Equal(got, c.want) || (got == nil) != (c.want == nil) {
			t.Errorf("%s: dedupe(%v) = %v, want %v", c.name, c.in, got, c.want)
		}
	}

	const n = 100_000
	want := make([]uuid.UUID, n)
	for i := range want {
		want[i] = uuid.New()
	}
	// Each id, then every id again in reverse order.
	in := slices.Concat(want, want)
	slices.Reverse(in[n:])
	start := time.Now()
	got := dedupe(in)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("dedupe of %d ids took %v", len(in), d)
	}
	if !slices.Equal(got, want) {
		t.Errorf("dedupe of %d ids: %d left, or not in the order of their first place", len(in), len(got))
	}
}
