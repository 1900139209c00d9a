package store

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/converge-run/converge"
)

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
	rows, err := s.db.Query(ctx, `SELECT kind, status, count(*) FROM converge_runs
		WHERE finished_at IS NULL OR id >= $1
		GROUP BY kind, status ORDER BY kind, status`, uuidFloor(since))
	if err != nil {
		return nil, fmt.Errorf("count runs: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[KindStatusCount])
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
	rows, err := s.db.Query(ctx, `SELECT kind, count(*) FROM converge_dead_letters WHERE status = 'open'
		GROUP BY kind ORDER BY kind`)
	if err != nil {
		return nil, fmt.Errorf("count open dead letters: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[KindCount])
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
	rows, err := s.db.Query(ctx, `SELECT date_trunc('hour', created_at AT TIME ZONE 'UTC'), count(*)
		FROM converge_dead_letters WHERE id >= $1 AND created_at >= $2
		GROUP BY 1`, uuidFloor(start.Add(-time.Minute)), start)
	if err != nil {
		return nil, fmt.Errorf("count dead letters per hour: %w", err)
	}
	counts := map[time.Time]int64{}
	var h time.Time
	var n int64
	if _, err := pgx.ForEachRow(rows, []any{&h, &n}, func() error {
		counts[time.Date(h.Year(), h.Month(), h.Day(), h.Hour(), 0, 0, 0, time.UTC)] = n
		return nil
	}); err != nil {
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
	rows, err := s.db.Query(ctx, `SELECT kind, pattern, min(sample), count(*) FROM (
			SELECT kind, `+normalizeErrorSQL+` AS pattern, left(split_part(error_text, E'\n', 1), 300) AS sample
			FROM converge_dead_letters WHERE status = 'open') d
		GROUP BY kind, pattern ORDER BY count(*) DESC, kind, pattern LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("group failure causes: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[FailureCause])
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
	rows, err := s.db.Query(ctx, `SELECT r.id, r.event_id, r.kind, r.resource, r.version,
			(SELECT min(e.version) FROM converge_events e WHERE e.kind = r.kind AND e.resource = r.resource AND e.version > r.version),
			r.finished_at
		FROM converge_runs r WHERE r.end_status = 'superseded' ORDER BY r.finished_at DESC LIMIT $1`, limit)
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
