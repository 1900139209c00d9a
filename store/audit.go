package store

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/converge-run/converge"
)

func auditInsert(ctx context.Context, tx pgx.Tx, e converge.AuditEntry) error {
	if e.Targets == nil {
		e.Targets = []string{}
	}
	_, err := tx.Exec(ctx, `INSERT INTO converge_audit (id, actor, role, action, targets, reason, request_id, detail)
		VALUES ($1, $2, $3, $4, $5, nullif($6, ''), nullif($7, ''), $8)`,
		newID(), e.Actor, e.Role, e.Action, e.Targets, e.Reason, e.RequestID, e.Detail)
	if err != nil {
		return fmt.Errorf("write audit %s: %w", e.Action, err)
	}
	return nil
}

// AuditListParams pages the audit log.
type AuditListParams struct {
	Cursor *uuid.UUID
	Limit  int
	// Targets keeps the entries that name at least one of them (a run, a
	// dead letter or a workflow run by id, a stream as kind/resource, a
	// token by name); empty keeps every entry.
	Targets []string
}

// AuditList returns audit entries, newest first, and the cursor of the next
// page (nil on the last page).
func (s *Store) AuditList(ctx context.Context, p AuditListParams) ([]*converge.AuditEntry, *uuid.UUID, error) {
	where, args := `$1::uuid IS NULL OR id < $1`, []any{p.Cursor, p.Limit + 1}
	if len(p.Targets) > 0 {
		// Through the index on targets (converge_audit_targets).
		where, args = `($1::uuid IS NULL OR id < $1) AND targets ?| $3::text[]`, append(args, p.Targets)
	}
	rows, err := s.db.Query(ctx, `SELECT id, at, actor, role, action, targets, coalesce(reason, ''), coalesce(request_id, ''), detail
		FROM converge_audit WHERE `+where+` ORDER BY id DESC LIMIT $2`, args...)
	if err != nil {
		return nil, nil, fmt.Errorf("list audit: %w", err)
	}
	items, next, err := keysetPage(rows, p.Limit, func(row pgx.CollectableRow) (*converge.AuditEntry, error) {
		var e converge.AuditEntry
		err := row.Scan(&e.ID, &e.At, &e.Actor, &e.Role, &e.Action, &e.Targets, &e.Reason, &e.RequestID, &e.Detail)
		e.At = e.At.UTC()
		return &e, err
	}, func(e *converge.AuditEntry) uuid.UUID { return e.ID })
	if err != nil {
		return nil, nil, fmt.Errorf("list audit: %w", err)
	}
	return items, next, nil
}
