package store

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/converge-run/converge"
)

// Session is a signed-in dashboard user. The secret in the cookie is never
// stored: only its SHA-256 hash.
type Session struct {
	Actor     converge.Actor
	CSRFToken string
	CreatedAt time.Time
	ExpiresAt time.Time
}

// SessionCreateParams is a sign-in to the dashboard.
type SessionCreateParams struct {
	// Actor is who the token stands for.
	Actor converge.Actor
	// Token is the bearer token that was presented. When it is a stored
	// token, the session ends as soon as that token is revoked.
	Token string
	// TTL is how long the session lasts.
	TTL time.Duration
}

// newSecret returns 32 random bytes, base64url-encoded.
func newSecret() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// SessionCreate starts a dashboard session and returns its secret, the
// cookie's value. It also deletes expired sessions.
func (s *Store) SessionCreate(ctx context.Context, p SessionCreateParams) (string, *Session, error) {
	if !p.Actor.Role.Valid() {
		return "", nil, converge.Errorf(converge.EINVALID, "unknown role %q", p.Actor.Role)
	}
	secret := newSecret()
	sess := &Session{Actor: p.Actor, CSRFToken: newSecret()}
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM converge_sessions WHERE expires_at < now()`); err != nil {
			return fmt.Errorf("delete expired sessions: %w", err)
		}
		err := tx.QueryRow(ctx, `INSERT INTO converge_sessions (id_hash, actor, role, token_id, csrf_token, expires_at)
			VALUES ($1, $2, $3, (SELECT id FROM converge_tokens WHERE hash = $4 AND revoked_at IS NULL), $5,
			        now() + $6 * interval '1 microsecond')
			RETURNING created_at, expires_at`,
			HashToken(secret), p.Actor.Name, p.Actor.Role, HashToken(p.Token), sess.CSRFToken, p.TTL.Microseconds()).
			Scan(&sess.CreatedAt, &sess.ExpiresAt)
		if err != nil {
			return fmt.Errorf("insert session: %w", err)
		}
		return nil
	})
	if err != nil {
		return "", nil, fmt.Errorf("create session for %s: %w", p.Actor.Name, err)
	}
	sess.CreatedAt, sess.ExpiresAt = sess.CreatedAt.UTC(), sess.ExpiresAt.UTC()
	return secret, sess, nil
}

// SessionGet returns the live session of a secret, or ErrNotFound when it
// is unknown, expired, or its token was revoked. The actor's role is the
// token's current role.
func (s *Store) SessionGet(ctx context.Context, secret string) (*Session, error) {
	if secret == "" {
		return nil, converge.ErrNotFound
	}
	var sess Session
	var stale bool
	hash := HashToken(secret)
	err := s.db.QueryRow(ctx, `SELECT s.actor, coalesce(t.role, s.role), s.csrf_token, s.created_at, s.expires_at,
			s.last_seen_at < now() - interval '1 minute'
		FROM converge_sessions s LEFT JOIN converge_tokens t ON t.id = s.token_id
		WHERE s.id_hash = $1 AND s.expires_at > now() AND (s.token_id IS NULL OR t.revoked_at IS NULL)`, hash).
		Scan(&sess.Actor.Name, &sess.Actor.Role, &sess.CSRFToken, &sess.CreatedAt, &sess.ExpiresAt, &stale)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, converge.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get session: %w", err)
	}
	if stale {
		// last_seen_at is kept to the minute, so that most page views stay
		// a single read.
		if _, err := s.db.Exec(ctx, `UPDATE converge_sessions SET last_seen_at = now() WHERE id_hash = $1`, hash); err != nil {
			return nil, fmt.Errorf("touch session: %w", err)
		}
	}
	sess.CreatedAt, sess.ExpiresAt = sess.CreatedAt.UTC(), sess.ExpiresAt.UTC()
	return &sess, nil
}

// SessionDelete ends a session (sign-out). Deleting an unknown session is
// not an error.
func (s *Store) SessionDelete(ctx context.Context, secret string) error {
	if _, err := s.db.Exec(ctx, `DELETE FROM converge_sessions WHERE id_hash = $1`, HashToken(secret)); err != nil {
		return fmt.Errorf("delete session: %w", err)
	}
	return nil
}

// SessionFlashSet keeps a message (JSON) for the session's next page, as
// Post/Redirect/Get needs.
func (s *Store) SessionFlashSet(ctx context.Context, secret string, flash []byte) error {
	if _, err := s.db.Exec(ctx, `UPDATE converge_sessions SET flash = $2 WHERE id_hash = $1`, HashToken(secret), flash); err != nil {
		return fmt.Errorf("set session flash: %w", err)
	}
	return nil
}

// SessionFlashTake returns the session's flash message and clears it; nil
// when there is none.
func (s *Store) SessionFlashTake(ctx context.Context, secret string) ([]byte, error) {
	var flash []byte
	err := s.db.QueryRow(ctx, `UPDATE converge_sessions s SET flash = NULL
		FROM (SELECT id_hash, flash FROM converge_sessions WHERE id_hash = $1 AND flash IS NOT NULL FOR UPDATE) old
		WHERE s.id_hash = old.id_hash RETURNING old.flash`, HashToken(secret)).Scan(&flash)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("take session flash: %w", err)
	}
	return flash, nil
}
