package store

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
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
	err := s.pool.QueryRow(ctx, `SELECT s.actor, coalesce(t.role, s.role), s.csrf_token, s.created_at, s.expires_at,
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
		if _, err := s.pool.Exec(ctx, `UPDATE converge_sessions SET last_seen_at = now() WHERE id_hash = $1`, hash); err != nil {
			return nil, fmt.Errorf("touch session: %w", err)
		}
	}
	sess.CreatedAt, sess.ExpiresAt = sess.CreatedAt.UTC(), sess.ExpiresAt.UTC()
	return &sess, nil
}

// SessionDelete ends a session (sign-out). Deleting an unknown session is
// not an error.
func (s *Store) SessionDelete(ctx context.Context, secret string) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM converge_sessions WHERE id_hash = $1`, HashToken(secret)); err != nil {
		return fmt.Errorf("delete session: %w", err)
	}
	return nil
}

// SessionFlashSet keeps a message (JSON) for the session's next page, as
// Post/Redirect/Get needs.
func (s *Store) SessionFlashSet(ctx context.Context, secret string, flash []byte) error {
	if _, err := s.pool.Exec(ctx, `UPDATE converge_sessions SET flash = $2 WHERE id_hash = $1`, HashToken(secret), flash); err != nil {
		return fmt.Errorf("set session flash: %w", err)
	}
	return nil
}

// SessionFlashTake returns the session's flash message and clears it; nil
// when there is none.
func (s *Store) SessionFlashTake(ctx context.Context, secret string) ([]byte, error) {
	var flash []byte
	err := s.pool.QueryRow(ctx, `UPDATE converge_sessions s SET flash = NULL
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

// uuidFloor is the smallest version 7 UUID of time t: every id made at or
// after t (our ids are time-ordered) compares greater or equal.
func uuidFloor(t time.Time) uuid.UUID {
	var u uuid.UUID
	var ms [8]byte
	binary.BigEndian.PutUint64(ms[:], uint64(t.UnixMilli()))
	copy(u[:6], ms[2:])
	u[6] = 0x70
	u[8] = 0x80
	return u
}

// KindStatusCount is how many runs of a kind are in a status.
type KindStatusCount struct {
	Kind   string
	Status converge.RunStatus
	Count  int64
}

// DashboardRunCounts counts runs by kind and status: every unfinished run,
// and the finished runs created since since.
func (s *Store) DashboardRunCounts(ctx context.Context, since time.Time) ([]KindStatusCount, error) {
	rows, err := s.pool.Query(ctx, `SELECT kind, status, count(*) FROM converge_runs
		WHERE status IN ('queued', 'running', 'retrying') OR id >= $1
		GROUP BY kind, status ORDER BY kind, status`, uuidFloor(since))
	if err != nil {
		return nil, fmt.Errorf("count runs: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (KindStatusCount, error) {
		var c KindStatusCount
		err := row.Scan(&c.Kind, &c.Status, &c.Count)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("count runs: %w", err)
	}
	return out, nil
}

// KindCount is a count for one kind.
type KindCount struct {
	Kind  string
	Count int64
}

// DashboardOpenDeadLetters counts open dead letters by kind.
func (s *Store) DashboardOpenDeadLetters(ctx context.Context) ([]KindCount, error) {
	rows, err := s.pool.Query(ctx, `SELECT kind, count(*) FROM converge_dead_letters WHERE status = 'open'
		GROUP BY kind ORDER BY kind`)
	if err != nil {
		return nil, fmt.Errorf("count open dead letters: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (KindCount, error) {
		var c KindCount
		err := row.Scan(&c.Kind, &c.Count)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("count open dead letters: %w", err)
	}
	return out, nil
}

// HourCount is how many things happened in the hour starting at Hour.
type HourCount struct {
	Hour  time.Time
	Count int64
}

// DashboardDeadLettersPerHour counts the dead letters created in each of the
// last hours hours, oldest first, the current (partial) hour last. Every
// hour is present, with zero when nothing happened.
func (s *Store) DashboardDeadLettersPerHour(ctx context.Context, now time.Time, hours int) ([]HourCount, error) {
	end := now.UTC().Truncate(time.Hour).Add(time.Hour)
	start := end.Add(-time.Duration(hours) * time.Hour)
	rows, err := s.pool.Query(ctx, `SELECT date_trunc('hour', created_at AT TIME ZONE 'UTC'), count(*)
		FROM converge_dead_letters WHERE id >= $1 AND created_at >= $2
		GROUP BY 1`, uuidFloor(start.Add(-time.Minute)), start)
	if err != nil {
		return nil, fmt.Errorf("count dead letters per hour: %w", err)
	}
	counts := map[time.Time]int64{}
	for rows.Next() {
		var h time.Time
		var n int64
		if err := rows.Scan(&h, &n); err != nil {
			rows.Close()
			return nil, fmt.Errorf("count dead letters per hour: %w", err)
		}
		counts[time.Date(h.Year(), h.Month(), h.Day(), h.Hour(), 0, 0, 0, time.UTC)] = n
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count dead letters per hour: %w", err)
	}
	out := make([]HourCount, hours)
	for i := range out {
		h := start.Add(time.Duration(i) * time.Hour)
		out[i] = HourCount{Hour: h, Count: counts[h]}
	}
	return out, nil
}

// FailureCause is a group of open dead letters of one kind whose last
// errors read the same once ids and numbers are taken out.
type FailureCause struct {
	Kind string
	// Pattern is the normalized message: ids, hex strings, IPv4 addresses
	// and long numbers replaced by <id>, <hex>, <ip> and <n>.
	Pattern string
	// Sample is one of the messages as it was.
	Sample string
	Count  int64
}

// normalizeErrorSQL normalizes the first line of a dead letter's error text:
// UUIDs, hex strings (6+ characters with both digits and letters), IPv4
// addresses and numbers of 4+ digits are replaced, so that messages that
// differ only in those group together. Short numbers, such as HTTP statuses,
// stay.
const normalizeErrorSQL = `left(regexp_replace(regexp_replace(regexp_replace(regexp_replace(regexp_replace(
	split_part(error_text, E'\n', 1),
	'[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}', '<id>', 'g'),
	'\m(?=[0-9a-fA-F]*[0-9])(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{6,}\M', '<hex>', 'g'),
	'\m[0-9]{1,3}(\.[0-9]{1,3}){3}\M', '<ip>', 'g'),
	'\m[0-9]{4,}\M', '<n>', 'g'),
	'\s+', ' ', 'g'), 200)`

// DashboardFailureCauses groups the open dead letters by kind and normalized
// error message, largest groups first.
func (s *Store) DashboardFailureCauses(ctx context.Context, limit int) ([]FailureCause, error) {
	rows, err := s.pool.Query(ctx, `SELECT kind, pattern, min(sample), count(*) FROM (
			SELECT kind, `+normalizeErrorSQL+` AS pattern, left(split_part(error_text, E'\n', 1), 300) AS sample
			FROM converge_dead_letters WHERE status = 'open') d
		GROUP BY kind, pattern ORDER BY count(*) DESC, kind, pattern LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("group failure causes: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (FailureCause, error) {
		var c FailureCause
		err := row.Scan(&c.Kind, &c.Pattern, &c.Sample, &c.Count)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("group failure causes: %w", err)
	}
	return out, nil
}

// Supersession is a run ended because a newer version of its stream was
// accepted.
type Supersession struct {
	RunID    uuid.UUID
	EventID  uuid.UUID
	Kind     string
	Resource string
	Version  int64
	// ByVersion is the next version accepted for the stream, the one that
	// superseded the run.
	ByVersion *int64
	At        time.Time
}

// DashboardSupersessions returns the most recently superseded runs.
func (s *Store) DashboardSupersessions(ctx context.Context, limit int) ([]Supersession, error) {
	rows, err := s.pool.Query(ctx, `SELECT r.id, r.event_id, r.kind, r.resource, r.version,
			(SELECT min(e.version) FROM converge_events e WHERE e.kind = r.kind AND e.resource = r.resource AND e.version > r.version),
			r.finished_at
		FROM converge_runs r WHERE r.status = 'superseded' ORDER BY r.finished_at DESC LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("list supersessions: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Supersession, error) {
		var x Supersession
		err := row.Scan(&x.RunID, &x.EventID, &x.Kind, &x.Resource, &x.Version, &x.ByVersion, &x.At)
		x.At = x.At.UTC()
		return x, err
	})
	if err != nil {
		return nil, fmt.Errorf("list supersessions: %w", err)
	}
	return out, nil
}

// StreamHistoryParams pages the history of one stream by version.
type StreamHistoryParams struct {
	Kind     string
	Resource string
	// Before lists only events with a version below it; 0 starts at the
	// newest.
	Before int64
	Limit  int
}

// StreamHistory is a page of one stream's events, newest first, each with
// every run (oldest first) and each run's attempts.
type StreamHistory struct {
	Stream *converge.Stream
	Events []*converge.Event
	// NextBefore is the cursor of the next (older) page, 0 on the last.
	NextBefore int64
}

// StreamHistoryGet returns a page of a stream's history, or ErrNotFound for
// a stream that never had an event.
func (s *Store) StreamHistoryGet(ctx context.Context, p StreamHistoryParams) (*StreamHistory, error) {
	st, err := s.StreamGet(ctx, p.Kind, p.Resource)
	if err != nil {
		return nil, err
	}
	h := &StreamHistory{Stream: st}
	rows, err := s.pool.Query(ctx, `SELECT `+eventColumns+` FROM converge_events e
		WHERE e.kind = $1 AND e.resource = $2 AND ($3 = 0 OR e.version < $3)
		ORDER BY e.version DESC LIMIT $4`, p.Kind, p.Resource, p.Before, p.Limit+1)
	if err != nil {
		return nil, fmt.Errorf("list events of %s/%s: %w", p.Kind, p.Resource, err)
	}
	h.Events, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (*converge.Event, error) { return scanEvent(row) })
	if err != nil {
		return nil, fmt.Errorf("list events of %s/%s: %w", p.Kind, p.Resource, err)
	}
	if len(h.Events) > p.Limit {
		h.Events = h.Events[:p.Limit]
		h.NextBefore = h.Events[len(h.Events)-1].Version
	}
	if len(h.Events) == 0 {
		return h, nil
	}
	ids := make([]uuid.UUID, len(h.Events))
	byID := make(map[uuid.UUID]*converge.Event, len(h.Events))
	for i, e := range h.Events {
		ids[i] = e.ID
		byID[e.ID] = e
	}
	rows, err = s.pool.Query(ctx, `SELECT `+runColumns+` FROM converge_runs r WHERE r.event_id = ANY($1) ORDER BY r.event_id, r.number`, ids)
	if err != nil {
		return nil, fmt.Errorf("list runs of %s/%s: %w", p.Kind, p.Resource, err)
	}
	runs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*converge.Run, error) { return scanRun(row) })
	if err != nil {
		return nil, fmt.Errorf("list runs of %s/%s: %w", p.Kind, p.Resource, err)
	}
	if err := s.attachAttempts(ctx, s.pool, runs); err != nil {
		return nil, err
	}
	for _, r := range runs {
		e := byID[r.EventID]
		e.Runs = append(e.Runs, r)
	}
	return h, nil
}
