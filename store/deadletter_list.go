package store

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/converge-run/converge"
)

// DeadLetterList returns dead letters matching p, newest first by
// (created_at, id), and the cursor of the next page (nil on the last page).
// An empty status lists open dead letters.
func (s *Store) DeadLetterList(ctx context.Context, p *converge.DeadLetterListParams) ([]*converge.DeadLetter, *converge.DeadLetterCursor, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = 50
	}
	items, _, err := deadLetterQuery(ctx, s.db, deadLetterColumns, scanDeadLetter, &p.DeadLetterFilter, p.Cursor, limit+1)
	if err != nil {
		return nil, nil, fmt.Errorf("list dead letters: %w", err)
	}
	var next *converge.DeadLetterCursor
	if len(items) > limit {
		items = items[:limit]
		last := items[len(items)-1]
		next = &converge.DeadLetterCursor{CreatedAt: last.CreatedAt, ID: last.ID}
	}
	return items, next, nil
}

// DeadLetterListSQL returns the statement and arguments DeadLetterList runs
// first for p, for looking at its plan (docs/dead-letters.md): the list
// query, or for a q with other filters the walk (see deadLetterWalk).
func DeadLetterListSQL(p *converge.DeadLetterListParams) (string, []any) {
	limit := p.Limit
	if limit <= 0 {
		limit = 50
	}
	w := newDeadLetterWalk(deadLetterColumns, &p.DeadLetterFilter, p.Cursor, limit+1)
	if w.walk != "" {
		return w.walkSQL(), w.args
	}
	return w.plainSQL(), w.args
}

// deadLetterQuery returns the first limit dead letters f selects after
// cursor, newest first, each read by scan from columns (and then the
// extra columns it is given), and the way they were found: walkDone,
// walkOn or walkTrigram after a walk, walkNone without one.
//
// Every statement runs as an unnamed statement (QueryExecModeExec), so that
// each call is planned with its values: the planner sees the actual
// prefix, search text and time range when it picks an index.
func deadLetterQuery[T any](ctx context.Context, db querier, columns string, scan func(pgx.Row, ...any) (T, error),
	f *converge.DeadLetterFilter, cursor *converge.DeadLetterCursor, limit int) ([]T, int, error) {
	w := newDeadLetterWalk(columns, f, cursor, limit)
	collect := func(sql string, args []any) ([]T, error) {
		rows, err := db.Query(ctx, sql, append([]any{pgx.QueryExecModeExec}, args...)...)
		if err != nil {
			return nil, err
		}
		return pgx.CollectRows(rows, func(row pgx.CollectableRow) (T, error) { return scan(row) })
	}
	if w.walk == "" {
		items, err := collect(w.plainSQL(), w.args)
		return items, walkNone, err
	}
	rows, err := db.Query(ctx, w.walkSQL(), append([]any{pgx.QueryExecModeExec}, w.args...)...)
	if err != nil {
		return nil, 0, err
	}
	type walked struct {
		v T
		r walkRow
	}
	walks, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (walked, error) {
		var x walked
		r := &x.r
		var err error
		x.v, err = scan(row, &r.at, &r.id, &r.hit, &r.n, &r.hits, &r.q, &r.rest, &r.narrow, &r.first, &r.oldest, &r.table)
		return x, err
	})
	if err != nil {
		return nil, 0, err
	}
	var found []T
	var last *walkRow
	for i := range walks {
		x := &walks[i]
		if x.r.hit {
			found = append(found, x.v)
		}
		if x.r.n == int64(w.budget) {
			last = &x.r
		}
	}
	switch way := w.next(len(found), last); way {
	case walkDone:
		return found, way, nil
	case walkOn:
		more, err := collect(w.onSQL(), append(slices.Clip(w.args), last.at, last.id))
		if err != nil {
			return nil, way, err
		}
		found = append(found, more...)
		return found[:min(len(found), limit)], way, nil
	default:
		items, err := collect(w.plainSQL(), w.args)
		return items, way, err
	}
}

// deadLetterWalk is the list query of one call: the ordinary query, and
// for a q with a narrowing filter (kind, resource, reason, since, until)
// the walk and what follows it.
//
// The trigram index finds the rows of a rare q quickly, but for a common q
// it builds a bitmap of every row of the table that matches (a quarter of
// the table: 100+ ms), which the planner prices far too low and ANDs with
// an already narrow btree range. Reading the narrowing filters' rows in
// list order and checking q on each is then a few milliseconds. Whether q
// is rare cannot be told from its text, so the walk reads at most budget
// rows in list order through an index that keeps that order (its
// conditions: status, kind, reason with a kind, since, until, cursor),
// checks the rest (resource, reason without a kind) and q on each row, and
// returns the first limit matches and, if it read that far, its budget-th
// row with counts. Then (next):
//
//   - walkDone: the walk found limit matches, or read every row its
//     conditions select. Its matches are the answer.
//   - walkOn: reading on without the trigram index is cheaper than the
//     trigram index. The answer is the walk's matches and the rows after
//     its budget-th row from a plan that cannot use the trigram index (q
//     written "(...) IS TRUE": the planner keeps its estimate of q, but no
//     index serves it).
//   - walkTrigram: the ordinary query, which may use the trigram index.
//
// The branches give the rows of the ordinary query, in its order.
type deadLetterWalk struct {
	columns string
	args    []any
	// where is every condition of the ordinary query, cond every one but
	// q; walk is the walk's ("": no walk).
	where, q, cond, walk string
	// rest is the conditions the walk checks on each row; resource and
	// reason are those of them that an index of their own serves ("true"
	// when not in use).
	rest, resource, reason string
	// limit is the placeholder of the limit.
	limit          string
	limitN, budget int
}

// newDeadLetterWalk builds the list query of the first limit dead letters f
// selects after cursor (nil: from the newest), reading columns.
func newDeadLetterWalk(columns string, f *converge.DeadLetterFilter, cursor *converge.DeadLetterCursor, limit int) *deadLetterWalk {
	w := &deadLetterWalk{columns: columns}
	arg := func(v any) string {
		w.args = append(w.args, v)
		return "$" + strconv.Itoa(len(w.args))
	}
	var where, cond, walk, rest, resource, reason []string
	add := func(c string, to *[]string) {
		where = append(where, c)
		cond = append(cond, c)
		*to = append(*to, c)
	}
	status := f.Status
	if status == "" {
		status = converge.DeadLetterOpen
	}
	add("d.status = "+arg(string(status)), &walk)
	if f.Kind != "" {
		add("d.kind = "+arg(f.Kind), &walk)
	}
	if f.Resource != "" {
		// A prefix as a range in byte order (the operators of
		// text_pattern_ops), which the resource index serves directly.
		add("d.resource ~>=~ "+arg(f.Resource), &resource)
		if hi, ok := prefixUpperBound(f.Resource); ok {
			add("d.resource ~<~ "+arg(hi), &resource)
		}
		rest = append(rest, resource...)
	}
	if f.Reason != "" {
		if f.Kind != "" {
			add("d.reason = "+arg(string(f.Reason)), &walk)
		} else {
			add("d.reason = "+arg(string(f.Reason)), &reason)
			rest = append(rest, reason...)
		}
	}
	if f.Q != "" {
		w.q = "d.error_text ILIKE " + arg("%"+escapeLike(f.Q)+"%")
		where = append(where, w.q)
	}
	if f.Since != nil {
		add("d.created_at >= "+arg(*f.Since), &walk)
	}
	if f.Until != nil {
		add("d.created_at <= "+arg(*f.Until), &walk)
	}
	narrowed := len(cond) > 1
	if cursor != nil {
		add("(d.created_at, d.id) < ("+arg(cursor.CreatedAt)+", "+arg(cursor.ID)+")", &walk)
	}
	w.where, w.limit, w.limitN = strings.Join(where, " AND "), arg(limit), limit
	if w.q != "" && narrowed {
		w.cond, w.walk = strings.Join(cond, " AND "), strings.Join(walk, " AND ")
		w.rest, w.resource, w.reason = and(rest), and(resource), and(reason)
		w.budget = deadLetterWalkBudget(limit)
	}
	return w
}

// listOrder is the list's order, newest first.
const listOrder = ` ORDER BY d.created_at DESC, d.id DESC`

// and joins conds with AND, in parentheses; "true" for none.
func and(conds []string) string {
	if len(conds) == 0 {
		return "true"
	}
	return "(" + strings.Join(conds, " AND ") + ")"
}

// deadLetterWalkBudget is how many rows the walk reads at most: enough to
// fill the page when q and the rest together match one row in ten, and
// to guess how often they match when they do not.
func deadLetterWalkBudget(limit int) int {
	return max(10*limit, 500)
}

// plainSQL is the ordinary list query.
func (w *deadLetterWalk) plainSQL() string {
	return `SELECT ` + w.columns + ` FROM converge_dead_letters d WHERE ` + w.where + listOrder + ` LIMIT ` + w.limit
}

// walkSQL is the walk: its matches (at most limit, newest first) and its
// budget-th row, each followed by the columns of a walkRow.
func (w *deadLetterWalk) walkSQL() string {
	hit := "(" + w.rest + " AND " + w.q + ")"
	budget := strconv.Itoa(w.budget)
	return `SELECT ` + w.columns + `, d._at, d._id, d._hit, d._n, d._hits, d._q, d._rest, d._narrow, d._first,
	(SELECT d.created_at FROM converge_dead_letters d WHERE ` + w.walk + ` ORDER BY d.created_at, d.id LIMIT 1),
	(SELECT greatest(t.reltuples, 0)::float8 FROM pg_class t WHERE t.oid = 'converge_dead_letters'::regclass)
FROM (
	SELECT ` + w.columns + `, d.created_at AS _at, d.id AS _id, ` + hit + ` AS _hit,
		row_number() OVER win AS _n,
		count(*) FILTER (WHERE ` + hit + `) OVER win AS _hits,
		count(*) FILTER (WHERE ` + w.q + `) OVER win AS _q,
		count(*) FILTER (WHERE ` + w.rest + `) OVER win AS _rest,
		least(count(*) FILTER (WHERE ` + w.resource + `) OVER win, count(*) FILTER (WHERE ` + w.reason + `) OVER win) AS _narrow,
		first_value(d.created_at) OVER win AS _first
	FROM converge_dead_letters d WHERE ` + w.walk + `
	WINDOW win AS (` + listOrder + ` ROWS UNBOUNDED PRECEDING)` + listOrder + ` LIMIT ` + budget + `
) d WHERE d._hit OR d._n = ` + budget + `
ORDER BY d._at DESC, d._id DESC LIMIT ` + w.limit
}

// onSQL reads on after the walk's budget-th row (the two arguments after
// w.args) without the trigram index.
func (w *deadLetterWalk) onSQL() string {
	n := len(w.args)
	return `SELECT ` + w.columns + ` FROM converge_dead_letters d WHERE ` + w.cond + ` AND (` + w.q + `) IS TRUE
	AND (d.created_at, d.id) < ($` + strconv.Itoa(n+1) + `, $` + strconv.Itoa(n+2) + `)` + listOrder + ` LIMIT ` + w.limit
}

// walkRow is what the walk tells of a row besides its columns.
type walkRow struct {
	at  time.Time
	id  uuid.UUID
	hit bool
	// n is the row's place in the walk; hits, q, rest and narrow are how
	// many of the first n rows matched (the rest and q), matched q,
	// passed the rest, and passed the narrower of resource and reason.
	n, hits, q, rest, narrow int64
	// first is the walk's first row's created_at, oldest that of the last
	// row its conditions select.
	first, oldest time.Time
	// table is the planner's count of rows in the table.
	table float64
}

const (
	walkNone = iota
	walkDone
	walkOn
	walkTrigram
)

// next says what answers after the walk found found matches; last is its
// budget-th row, nil when it read every row its conditions select.
//
// The trigram index reads an entry for each row of the table that q
// matches; q's share of the table is guessed from its share of the walked
// rows (q of n). Reading on without it costs a heap row per row read: the
// walk's way, until limit matches at the rate seen ((limit-h)·n/h more
// rows) or to the end of its rows, or through the index of the narrower of
// resource and reason (its share of the walk's rows). How many rows the
// walk's conditions select is guessed from the time its n rows span, at
// the same rate back to the oldest of them. At a million rows (PostgreSQL
// 15, 2 cores) a heap row read costs 2-4 µs and a trigram entry 0.2-0.4 µs;
// reading on is taken when it reads fewer than a sixteenth as many rows as
// the trigram index would read entries (the guesses come from a few
// hundred rows, and a wrong choice either way costs about 100 ms), or when
// no walked row passed the rest (its own index then reads few rows).
func (w *deadLetterWalk) next(found int, last *walkRow) int {
	if found >= w.limitN || last == nil {
		return walkDone
	}
	n, h, q := float64(last.n), float64(last.hits), float64(last.q)
	entries := q / n * last.table
	rows := last.table
	if span := last.first.Sub(last.at); span > 0 {
		rows = min(rows, n*float64(last.first.Sub(last.oldest))/float64(span))
	}
	rows = max(rows, n)
	walk := rows - n
	if h > 0 {
		walk = min(walk, (float64(w.limitN)-h)*n/h)
	}
	narrow := float64(last.narrow) / n * rows
	if last.rest == 0 || 16*min(walk, narrow) < entries {
		return walkOn
	}
	return walkTrigram
}

// prefixUpperBound returns the least string above every string that starts
// with prefix, in byte order; false when there is none.
func prefixUpperBound(prefix string) (string, bool) {
	b := []byte(prefix)
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] < 0x7f {
			b[i]++
			return string(b[:i+1]), true
		}
	}
	return "", false
}

// escapeLike escapes the LIKE wildcards of s (with the default escape
// character, the backslash).
func escapeLike(s string) string {
	return strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(s)
}
