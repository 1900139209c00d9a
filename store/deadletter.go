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

func scanDeadLetter(row pgx.Row) (*converge.DeadLetter, error) {
	var d converge.DeadLetter
	err := row.Scan(&d.ID, &d.EventID, &d.RunID, &d.Kind, &d.Resource, &d.Version, &d.Reason, &d.Attempts,
		&d.Error, &d.Errors, &d.Payload, &d.Status, &d.CreatedAt, &d.ResolvedAt, &d.ResolvedBy, &d.SupersededByVersion)
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
	sql, args := deadLetterListSQL(deadLetterColumns, &p.DeadLetterFilter, p.Cursor, limit+1)
	// QueryExecModeExec plans each call with its values (an unnamed
	// statement), so that the planner sees the actual prefix, search text
	// and time range when it picks an index.
	rows, err := s.pool.Query(ctx, sql, append([]any{pgx.QueryExecModeExec}, args...)...)
	if err != nil {
		return nil, nil, fmt.Errorf("list dead letters: %w", err)
	}
	items, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*converge.DeadLetter, error) { return scanDeadLetter(row) })
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
// for p, for looking at its plan (docs/dead-letters.md).
func DeadLetterListSQL(p *converge.DeadLetterListParams) (string, []any) {
	limit := p.Limit
	if limit <= 0 {
		limit = 50
	}
	return deadLetterListSQL(deadLetterColumns, &p.DeadLetterFilter, p.Cursor, limit+1)
}

// deadLetterListSQL builds the list query with only the conditions in use,
// so that each combination of filters gets a plan of its own.
func deadLetterListSQL(columns string, f *converge.DeadLetterFilter, cursor *converge.DeadLetterCursor, limit int) (string, []any) {
	var where []string
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	status := f.Status
	if status == "" {
		status = converge.DeadLetterOpen
	}
	where = append(where, "d.status = "+arg(string(status)))
	if f.Kind != "" {
		where = append(where, "d.kind = "+arg(f.Kind))
	}
	if f.Resource != "" {
		// A prefix as a range in byte order (the operators of
		// text_pattern_ops), which the resource index serves directly.
		where = append(where, "d.resource ~>=~ "+arg(f.Resource))
		if hi, ok := prefixUpperBound(f.Resource); ok {
			where = append(where, "d.resource ~<~ "+arg(hi))
		}
	}
	if f.Reason != "" {
		where = append(where, "d.reason = "+arg(string(f.Reason)))
	}
	if f.Q != "" {
		where = append(where, "d.error_text ILIKE "+arg("%"+escapeLike(f.Q)+"%"))
	}
	if f.Since != nil {
		where = append(where, "d.created_at >= "+arg(*f.Since))
	}
	if f.Until != nil {
		where = append(where, "d.created_at <= "+arg(*f.Until))
	}
	if cursor != nil {
		where = append(where, "(d.created_at, d.id) < ("+arg(cursor.CreatedAt)+", "+arg(cursor.ID)+")")
	}
	sql := `SELECT ` + columns + ` FROM converge_dead_letters d WHERE ` + strings.Join(where, " AND ") +
		` ORDER BY d.created_at DESC, d.id DESC LIMIT ` + arg(limit)
	return sql, args
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
	Audit       AuditEntry
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
func (s *Store) DeadLetterDiscard(ctx context.Context, id uuid.UUID, audit AuditEntry) (*converge.DeadLetter, error) {
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
	Audit       AuditEntry
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
	sql, args := deadLetterListSQL("d.id", f, nil, converge.MaxDeadLetterBulk+1)
	rows, err := tx.Query(ctx, sql, append([]any{pgx.QueryExecModeExec}, args...)...)
	if err != nil {
		return nil, false, fmt.Errorf("select dead letters: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
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
	Audit  AuditEntry
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
