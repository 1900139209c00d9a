package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/converge-run/converge"
)

// deadLetterColumns is the column list scanDeadLetter reads, in order.
const deadLetterColumns = `d.id, d.event_id, d.run_id, d.kind, d.resource, d.version, d.reason, d.attempts,
	d.error, d.errors, d.payload, d.status, d.created_at, d.resolved_at, d.resolved_by, d.superseded_by_version`

// scanDeadLetter reads deadLetterColumns, then any columns after them into
// extra.
func scanDeadLetter(row pgx.Row, extra ...any) (*converge.DeadLetter, error) {
	var d converge.DeadLetter
	err := row.Scan(append([]any{&d.ID, &d.EventID, &d.RunID, &d.Kind, &d.Resource, &d.Version, &d.Reason, &d.Attempts,
		&d.Error, &d.Errors, &d.Payload, &d.Status, &d.CreatedAt, &d.ResolvedAt, &d.ResolvedBy, &d.SupersededByVersion}, extra...)...)
	if err != nil {
		return nil, err
	}
	d.CreatedAt = d.CreatedAt.UTC()
	if d.ResolvedAt != nil {
		v := d.ResolvedAt.UTC()
		d.ResolvedAt = &v
	}
	if d.Errors == nil {
		d.Errors = []*converge.Error{}
	}
	return &d, nil
}

// DeadLetterGet returns one dead letter, or ErrNotFound.
func (s *Store) DeadLetterGet(ctx context.Context, id uuid.UUID) (*converge.DeadLetter, error) {
	d, err := scanDeadLetter(s.pool.QueryRow(ctx, `SELECT `+deadLetterColumns+` FROM converge_dead_letters d WHERE d.id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, converge.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get dead letter %s: %w", id, err)
	}
	return d, nil
}

// DeadLetterList returns dead letters matching p, newest first by
// (created_at, id), and the cursor of the next page (nil on the last page).
// An empty status lists open dead letters.
func (s *Store) DeadLetterList(ctx context.Context, p *converge.DeadLetterListParams) ([]*converge.DeadLetter, *converge.DeadLetterCursor, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = 50
	}
	items, _, err := deadLetterQuery(ctx, s.pool, deadLetterColumns, scanDeadLetter, &p.DeadLetterFilter, p.Cursor, limit+1)
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
	var found []T
	var last *walkRow
	for rows.Next() {
		var r walkRow
		v, err := scan(rows, &r.at, &r.id, &r.hit, &r.n, &r.hits, &r.q, &r.rest, &r.narrow, &r.first, &r.oldest, &r.table)
		if err != nil {
			rows.Close()
			return nil, 0, err
		}
		if r.hit {
			found = append(found, v)
		}
		if r.n == int64(w.budget) {
			last = &r
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, 0, err
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

const listOrder = ` ORDER BY d.created_at DESC, d.id DESC`

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

// DeadLetterRedriveParams is an operator's redrive of one dead letter.
type DeadLetterRedriveParams struct {
	ID uuid.UUID
	// MaxAttempts is the max_attempts of a new run, by kind; a kind missing
	// here keeps the max_attempts of the run that failed.
	MaxAttempts map[string]int
	Audit       converge.AuditEntry
}

// DeadLetterRedrive starts a new run (number + 1, fresh attempts) of the
// dead letter's event and marks the dead letter redriven, in one
// transaction with its audit entry. It fails with ErrNotFound, ENOTOPEN
// unless the dead letter is open, and ESUPERSEDED when a newer version of
// the stream has been accepted since.
func (s *Store) DeadLetterRedrive(ctx context.Context, p DeadLetterRedriveParams) (*converge.Run, error) {
	res, runs, err := s.deadLetterAct(ctx, actRedrive, DeadLetterBulkParams{IDs: []uuid.UUID{p.ID}, MaxAttempts: p.MaxAttempts, Audit: p.Audit})
	if err != nil {
		return nil, fmt.Errorf("redrive dead letter %s: %w", p.ID, err)
	}
	if err := skipError(res, "redriven"); err != nil {
		return nil, err
	}
	return runs[p.ID], nil
}

// DeadLetterDiscard marks an open dead letter discarded, in one transaction
// with its audit entry, and returns it. It fails with ErrNotFound, or
// ENOTOPEN unless the dead letter is open.
func (s *Store) DeadLetterDiscard(ctx context.Context, id uuid.UUID, audit converge.AuditEntry) (*converge.DeadLetter, error) {
	res, _, err := s.deadLetterAct(ctx, actDiscard, DeadLetterBulkParams{IDs: []uuid.UUID{id}, Audit: audit})
	if err != nil {
		return nil, fmt.Errorf("discard dead letter %s: %w", id, err)
	}
	if err := skipError(res, "discarded"); err != nil {
		return nil, err
	}
	return s.DeadLetterGet(ctx, id)
}

// skipError turns the skip of a single-item action into its error.
func skipError(res *converge.DeadLetterBulkResult, participle string) error {
	if len(res.Skipped) == 0 {
		return nil
	}
	sk := res.Skipped[0]
	switch sk.Reason {
	case converge.SkipNotFound:
		return converge.ErrNotFound
	case converge.SkipNotOpen:
		return converge.Errorf(converge.ENOTOPEN, "dead letter %s is not open; only an open dead letter can be %s", sk.ID, participle)
	case converge.SkipSuperseded:
		return converge.Errorf(converge.ESUPERSEDED, "a newer version of the stream of dead letter %s has been accepted since; redriving it would go backwards", sk.ID)
	default:
		return converge.Errorf(converge.ECONFLICT, "dead letter %s cannot be %s: %s", sk.ID, participle, sk.Reason)
	}
}

// DeadLetterBulkParams selects dead letters for a bulk redrive or discard:
// either IDs or Filter (at most converge.MaxDeadLetterBulk of its matches,
// newest first).
type DeadLetterBulkParams struct {
	IDs    []uuid.UUID
	Filter *converge.DeadLetterFilter
	// DryRun checks every dead letter as the action would and changes
	// nothing.
	DryRun bool
	// MaxAttempts is used by redrive: see DeadLetterRedriveParams.
	MaxAttempts map[string]int
	Audit       converge.AuditEntry
}

// DeadLetterRedriveMany redrives each selected dead letter that is open and
// not superseded, in one transaction with one audit entry, and reports the
// others as skipped with a reason (not-found, not-open, superseded).
func (s *Store) DeadLetterRedriveMany(ctx context.Context, p DeadLetterBulkParams) (*converge.DeadLetterBulkResult, error) {
	res, _, err := s.deadLetterAct(ctx, actRedrive, p)
	if err != nil {
		return nil, fmt.Errorf("redrive dead letters: %w", err)
	}
	return res, nil
}

// DeadLetterDiscardMany discards each selected dead letter that is open, in
// one transaction with one audit entry, and reports the others as skipped
// with a reason (not-found, not-open).
func (s *Store) DeadLetterDiscardMany(ctx context.Context, p DeadLetterBulkParams) (*converge.DeadLetterBulkResult, error) {
	res, _, err := s.deadLetterAct(ctx, actDiscard, p)
	if err != nil {
		return nil, fmt.Errorf("discard dead letters: %w", err)
	}
	return res, nil
}

type deadLetterAction string

const (
	actRedrive deadLetterAction = "dead_letter.redrive"
	actDiscard deadLetterAction = "dead_letter.discard"
)

// lockedDeadLetter is what an action needs of a dead letter.
type lockedDeadLetter struct {
	id, eventID, runID uuid.UUID
	kind, resource     string
	version            int64
	status             converge.DeadLetterStatus
}

// deadLetterAct runs a redrive or discard of the selected dead letters in
// one transaction. Locks are taken in one global order, the same as
// acceptance and attempts use: the streams' rows (sorted by kind,
// resource), then the dead letters' rows (sorted by id). Holding the stream
// row is what makes "not superseded" true until commit: an event accepted
// meanwhile waits, and then supersedes the new run.
func (s *Store) deadLetterAct(ctx context.Context, act deadLetterAction, p DeadLetterBulkParams) (*converge.DeadLetterBulkResult, map[uuid.UUID]*converge.Run, error) {
	if act == actRedrive && s.river == nil {
		return nil, nil, errors.New("store has no river client")
	}
	if (p.Filter == nil) == (p.IDs == nil) {
		return nil, nil, converge.Errorf(converge.EINVALID, "give either ids or a filter")
	}
	if len(p.IDs) > converge.MaxDeadLetterBulk {
		return nil, nil, converge.Errorf(converge.EINVALID, "at most %d dead letters per call", converge.MaxDeadLetterBulk)
	}
	res := &converge.DeadLetterBulkResult{Done: []uuid.UUID{}, Skipped: []converge.DeadLetterSkip{}, DryRun: p.DryRun}
	runs := map[uuid.UUID]*converge.Run{}
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		ids := dedupe(p.IDs)
		if p.Filter != nil {
			var err error
			ids, res.More, err = deadLetterMatch(ctx, tx, p.Filter)
			if err != nil {
				return err
			}
		}
		if len(ids) == 0 {
			return nil
		}
		// Streams first: read each dead letter's stream (they never
		// change), then lock the streams in order.
		rows, err := tx.Query(ctx, `SELECT DISTINCT kind, resource FROM converge_dead_letters WHERE id = ANY($1)`, ids)
		if err != nil {
			return fmt.Errorf("find streams: %w", err)
		}
		type stream struct{ kind, resource string }
		streams, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (stream, error) {
			var st stream
			return st, row.Scan(&st.kind, &st.resource)
		})
		if err != nil {
			return fmt.Errorf("find streams: %w", err)
		}
		kinds := make([]string, len(streams))
		resources := make([]string, len(streams))
		for i, st := range streams {
			kinds[i], resources[i] = st.kind, st.resource
		}
		latest := map[stream]int64{}
		rows, err = tx.Query(ctx, `SELECT s.kind, s.resource, s.latest_version FROM converge_streams s
			JOIN unnest($1::text[], $2::text[]) AS t(kind, resource) ON t.kind = s.kind AND t.resource = s.resource
			ORDER BY s.kind COLLATE "C", s.resource COLLATE "C" FOR UPDATE OF s`, kinds, resources)
		if err != nil {
			return fmt.Errorf("lock streams: %w", err)
		}
		for rows.Next() {
			var st stream
			var v int64
			if err := rows.Scan(&st.kind, &st.resource, &v); err != nil {
				rows.Close()
				return fmt.Errorf("lock streams: %w", err)
			}
			latest[st] = v
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("lock streams: %w", err)
		}
		rows, err = tx.Query(ctx, `SELECT id, event_id, run_id, kind, resource, version, status
			FROM converge_dead_letters WHERE id = ANY($1) ORDER BY id FOR UPDATE`, ids)
		if err != nil {
			return fmt.Errorf("lock dead letters: %w", err)
		}
		locked := map[uuid.UUID]*lockedDeadLetter{}
		for rows.Next() {
			var d lockedDeadLetter
			if err := rows.Scan(&d.id, &d.eventID, &d.runID, &d.kind, &d.resource, &d.version, &d.status); err != nil {
				rows.Close()
				return fmt.Errorf("lock dead letters: %w", err)
			}
			locked[d.id] = &d
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("lock dead letters: %w", err)
		}
		for _, id := range ids {
			d, ok := locked[id]
			switch {
			case !ok:
				res.Skipped = append(res.Skipped, converge.DeadLetterSkip{ID: id, Reason: converge.SkipNotFound})
				continue
			case d.status != converge.DeadLetterOpen:
				res.Skipped = append(res.Skipped, converge.DeadLetterSkip{ID: id, Reason: converge.SkipNotOpen})
				continue
			case act == actRedrive && latest[stream{d.kind, d.resource}] > d.version:
				res.Skipped = append(res.Skipped, converge.DeadLetterSkip{ID: id, Reason: converge.SkipSuperseded})
				continue
			}
			if act == actRedrive {
				var active bool
				err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM converge_runs WHERE kind = $1 AND resource = $2
					AND status IN ('queued', 'running', 'retrying'))`, d.kind, d.resource).Scan(&active)
				if err != nil {
					return fmt.Errorf("look for an unfinished run: %w", err)
				}
				if active {
					// Unreachable while the stream's latest version is this
					// dead letter's: its event's only unfinished run would
					// be a redrive, which resolves the dead letter.
					res.Skipped = append(res.Skipped, converge.DeadLetterSkip{ID: id, Reason: converge.ECONFLICT})
					continue
				}
			}
			res.Done = append(res.Done, id)
			if p.DryRun {
				continue
			}
			switch act {
			case actRedrive:
				run, err := s.deadLetterRedrive(ctx, tx, d, p.MaxAttempts, p.Audit.Actor)
				if err != nil {
					return err
				}
				runs[id] = run
			case actDiscard:
				if _, err := tx.Exec(ctx, `UPDATE converge_dead_letters SET status = 'discarded', resolved_at = now(), resolved_by = $2
					WHERE id = $1`, id, actorName(p.Audit.Actor)); err != nil {
					return fmt.Errorf("discard: %w", err)
				}
			}
		}
		if p.DryRun || len(res.Done) == 0 {
			return nil
		}
		audit := p.Audit
		audit.Action = string(act)
		audit.Targets = make([]string, len(res.Done))
		for i, id := range res.Done {
			audit.Targets[i] = id.String()
		}
		if act == actRedrive {
			runIDs := make([]string, len(res.Done))
			for i, id := range res.Done {
				runIDs[i] = runs[id].ID.String()
			}
			audit.Detail = map[string]any{"run_ids": runIDs}
		}
		return auditInsert(ctx, tx, audit)
	})
	if err != nil {
		return nil, nil, err
	}
	return res, runs, nil
}

// deadLetterRedrive adds the next run of d's event with its job and marks d
// redriven. The caller holds the stream's and d's row locks.
func (s *Store) deadLetterRedrive(ctx context.Context, tx pgx.Tx, d *lockedDeadLetter, maxAttempts map[string]int, actor string) (*converge.Run, error) {
	var next, failedMax int
	err := tx.QueryRow(ctx, `SELECT (SELECT max(number) + 1 FROM converge_runs WHERE event_id = $1),
			(SELECT max_attempts FROM converge_runs WHERE id = $2)`, d.eventID, d.runID).Scan(&next, &failedMax)
	if err != nil {
		return nil, fmt.Errorf("number the new run: %w", err)
	}
	n := failedMax
	if v := maxAttempts[d.kind]; v > 0 {
		n = v
	}
	ev := &converge.Event{ID: d.eventID, Kind: d.kind, Resource: d.resource, Version: d.version}
	run, err := s.runInsert(ctx, tx, ev, next, n)
	if err != nil {
		return nil, err
	}
	if _, err := tx.Exec(ctx, `UPDATE converge_dead_letters SET status = 'redriven', resolved_at = now(), resolved_by = $2
		WHERE id = $1`, d.id, actorName(actor)); err != nil {
		return nil, fmt.Errorf("mark redriven: %w", err)
	}
	return run, nil
}

// deadLetterMatch returns the ids of the dead letters a bulk filter selects
// (newest first, at most MaxDeadLetterBulk) and whether there are more.
func deadLetterMatch(ctx context.Context, tx pgx.Tx, f *converge.DeadLetterFilter) ([]uuid.UUID, bool, error) {
	ids, _, err := deadLetterQuery(ctx, tx, "d.id", func(row pgx.Row, extra ...any) (uuid.UUID, error) {
		var id uuid.UUID
		return id, row.Scan(append([]any{&id}, extra...)...)
	}, f, nil, converge.MaxDeadLetterBulk+1)
	if err != nil {
		return nil, false, fmt.Errorf("select dead letters: %w", err)
	}
	if len(ids) > converge.MaxDeadLetterBulk {
		return ids[:converge.MaxDeadLetterBulk], true, nil
	}
	return ids, false, nil
}

func dedupe(ids []uuid.UUID) []uuid.UUID {
	if ids == nil {
		return nil
	}
	out := make([]uuid.UUID, 0, len(ids))
	for _, id := range ids {
		if !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out
}

func actorName(a string) string {
	if a == "" {
		return "unknown"
	}
	return a
}

// DeadLetterPurgeParams is an operator's purge of discarded dead letters.
type DeadLetterPurgeParams struct {
	// OlderThan selects dead letters discarded at least this long ago.
	OlderThan time.Duration
	// Limit is the most dead letters one call deletes; 0 means 10,000.
	Limit  int
	DryRun bool
	Audit  converge.AuditEntry
}

// DeadLetterPurge deletes discarded dead letters whose discard is older
// than p.OlderThan, oldest discard first, and writes their ids to the audit
// log in the same transaction. It is the only way dead letters are deleted.
func (s *Store) DeadLetterPurge(ctx context.Context, p DeadLetterPurgeParams) (*converge.DeadLetterPurgeResult, error) {
	if p.OlderThan < 0 {
		return nil, converge.Errorf(converge.EINVALID, "older_than must not be negative")
	}
	limit := p.Limit
	if limit <= 0 {
		limit = 10_000
	}
	res := &converge.DeadLetterPurgeResult{Purged: []uuid.UUID{}, DryRun: p.DryRun}
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		lock := " FOR UPDATE SKIP LOCKED"
		if p.DryRun {
			lock = ""
		}
		rows, err := tx.Query(ctx, `SELECT id FROM converge_dead_letters
			WHERE status = 'discarded' AND resolved_at < now() - $1 * interval '1 microsecond'
			ORDER BY resolved_at, id LIMIT $2`+lock, p.OlderThan.Microseconds(), limit+1)
		if err != nil {
			return fmt.Errorf("select: %w", err)
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
		if err != nil {
			return fmt.Errorf("select: %w", err)
		}
		if len(ids) > limit {
			ids, res.More = ids[:limit], true
		}
		res.Purged = ids
		if p.DryRun || len(ids) == 0 {
			return nil
		}
		if _, err := tx.Exec(ctx, `DELETE FROM converge_dead_letters WHERE id = ANY($1)`, ids); err != nil {
			return fmt.Errorf("delete: %w", err)
		}
		audit := p.Audit
		audit.Action = "dead_letter.purge"
		audit.Targets = make([]string, len(ids))
		for i, id := range ids {
			audit.Targets[i] = id.String()
		}
		audit.Detail = map[string]any{"older_than": p.OlderThan.String(), "count": len(ids)}
		return auditInsert(ctx, tx, audit)
	})
	if err != nil {
		return nil, fmt.Errorf("purge dead letters: %w", err)
	}
	return res, nil
}
