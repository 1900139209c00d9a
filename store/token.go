package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/converge-run/converge"
)

// TokenPrefix starts every token converge issues, so that secret scanners
// can recognise one.
const TokenPrefix = "cvg_"

// Token is an API token's record. The token itself is never stored: only
// its SHA-256 hash.
type Token struct {
	ID         uuid.UUID     `json:"id"`
	Name       string        `json:"name"`
	Role       converge.Role `json:"role"`
	CreatedAt  time.Time     `json:"created_at"`
	LastUsedAt *time.Time    `json:"last_used_at"`
	RevokedAt  *time.Time    `json:"revoked_at"`
}

// HashToken returns the stored form of a token.
func HashToken(token string) []byte {
	h := sha256.Sum256([]byte(token))
	return h[:]
}

// NewTokenSecret returns a fresh random token.
func NewTokenSecret() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return TokenPrefix + base64.RawURLEncoding.EncodeToString(b)
}

// TokenCreate stores a new token named name with role and returns the token.
// It fails with ECONFLICT when the name is taken.
func (s *Store) TokenCreate(ctx context.Context, name string, role converge.Role, audit converge.AuditEntry) (string, *Token, error) {
	secret := NewTokenSecret()
	t := &Token{ID: newID(), Name: name, Role: role}
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `INSERT INTO converge_tokens (id, name, role, hash) VALUES ($1, $2, $3, $4) RETURNING created_at`,
			t.ID, name, role, HashToken(secret)).Scan(&t.CreatedAt)
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "23505" {
			return converge.Errorf(converge.ECONFLICT, "a token named %q exists", name)
		}
		if err != nil {
			return fmt.Errorf("insert token: %w", err)
		}
		audit.Action = "token.create"
		audit.Targets = []string{name}
		return auditInsert(ctx, tx, audit)
	})
	if err != nil {
		return "", nil, fmt.Errorf("create token %s: %w", name, err)
	}
	return secret, t, nil
}

// TokenList returns every token, newest first.
func (s *Store) TokenList(ctx context.Context) ([]*Token, error) {
	rows, err := s.db.Query(ctx, `SELECT id, name, role, created_at, last_used_at, revoked_at FROM converge_tokens ORDER BY created_at DESC`)
	if err != nil {
		return nil, fmt.Errorf("list tokens: %w", err)
	}
	tokens, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*Token, error) {
		var t Token
		err := row.Scan(&t.ID, &t.Name, &t.Role, &t.CreatedAt, &t.LastUsedAt, &t.RevokedAt)
		return &t, err
	})
	if err != nil {
		return nil, fmt.Errorf("list tokens: %w", err)
	}
	return tokens, nil
}

// TokenRevoke revokes the token named name at once.
func (s *Store) TokenRevoke(ctx context.Context, name string, audit converge.AuditEntry) error {
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE converge_tokens SET revoked_at = now() WHERE name = $1 AND revoked_at IS NULL`, name)
		if err != nil {
			return fmt.Errorf("revoke: %w", err)
		}
		if tag.RowsAffected() == 0 {
			return converge.ErrNotFound
		}
		audit.Action = "token.revoke"
		audit.Targets = []string{name}
		return auditInsert(ctx, tx, audit)
	})
	if err != nil {
		return fmt.Errorf("revoke token %s: %w", name, err)
	}
	return nil
}

// TokenAuthenticate returns the actor a token stands for, or ErrNotFound.
func (s *Store) TokenAuthenticate(ctx context.Context, token string) (*converge.Actor, error) {
	var a converge.Actor
	var stale bool
	hash := HashToken(token)
	err := s.db.QueryRow(ctx, `SELECT name, role, coalesce(last_used_at < now() - interval '1 minute', true)
		FROM converge_tokens WHERE hash = $1 AND revoked_at IS NULL`, hash).Scan(&a.Name, &a.Role, &stale)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, converge.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("authenticate token: %w", err)
	}
	if stale {
		// last_used_at is kept to the minute, so that authentication stays
		// a read on the hot path.
		if _, err := s.db.Exec(ctx, `UPDATE converge_tokens SET last_used_at = now() WHERE hash = $1`, hash); err != nil {
			return nil, fmt.Errorf("touch token: %w", err)
		}
	}
	return &a, nil
}
