package store

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/converge-run/converge"
)

// DeadLetterPurgeParams is an operator's purge of discarded dead letters.
type DeadLetterPurgeParams struct {
	// OlderThan selects dead letters discarded at least this long ago.
	OlderThan time.Duration
	// All selects every discarded dead letter, whenever it was discarded
	// (OlderThan is then ignored).
	All bool
	// Limit is the most dead letters one call deletes; 0 means 10,000.
	Limit int
	// DryRun selects the dead letters a purge would delete and deletes
	// nothing.
	DryRun bool
	// Audit is the audit entry written with the purge; the purge sets its
	// Action, Targets and Detail.
	Audit converge.AuditEntry
}

// DeadLetterPurge deletes discarded dead letters whose discard is older
// than p.OlderThan (every one with p.All), oldest discard first, and writes
// the purge to the audit log in the same transaction, with the ids deleted
// (none when nothing was). It is the only way dead letters are deleted.
func (s *Store) DeadLetterPurge(ctx context.Context, p DeadLetterPurgeParams) (*converge.DeadLetterPurgeResult, error) {
	if p.OlderThan < 0 {
		return nil, converge.InvalidField("older_than", "must not be negative")
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
			WHERE status = 'discarded' AND ($3 OR resolved_at < now() - $1 * interval '1 microsecond')
			ORDER BY resolved_at, id LIMIT $2`+lock, p.OlderThan.Microseconds(), limit+1, p.All)
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
		if p.DryRun {
			return nil
		}
		if len(ids) > 0 {
			if _, err := tx.Exec(ctx, `DELETE FROM converge_dead_letters WHERE id = ANY($1)`, ids); err != nil {
				return fmt.Errorf("delete: %w", err)
			}
		}
		audit := p.Audit
		audit.Action = "dead_letter.purge"
		audit.Targets = make([]string, len(ids))
		for i, id := range ids {
			audit.Targets[i] = id.String()
		}
		audit.Detail = map[string]any{"count": len(ids)}
		if !p.All {
			audit.Detail["older_than"] = p.OlderThan.String()
		}
		return auditInsert(ctx, tx, audit)
	})
	if err != nil {
		return nil, fmt.Errorf("purge dead letters: %w", err)
	}
	return res, nil
}
