package migrations

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/golang-migrate/migrate/v4"
	_ "github.com/golang-migrate/migrate/v4/database/pgx/v5" // registers pgx5://
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

//go:embed *.sql
var files embed.FS

// lockKey is the advisory lock every migration entry point holds.
const lockKey = 0x636f6e76 // "conv"

// Status is the schema state of a database.
type Status struct {
	Version      uint   // our newest applied migration, 0 when none
	Dirty        bool   // a migration failed half-way
	Latest       uint   // our newest migration in this binary
	RiverVersion int    // River's newest applied migration
	RiverLatest  int    // River's newest migration in this binary
	RiverMissing []int  // River migrations not applied yet
	Description  string // a one-line summary
}

// Current reports whether both schemas are fully applied and clean.
func (s Status) Current() bool {
	return !s.Dirty && s.Version == s.Latest && len(s.RiverMissing) == 0
}

// Up applies River's migrations and then ours.
func Up(ctx context.Context, databaseURL string) error {
	return withLock(ctx, databaseURL, func(pool *pgxpool.Pool) error {
		rm, err := riverMigrator(pool)
		if err != nil {
			return err
		}
		if _, err := rm.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
			return fmt.Errorf("migrate river up: %w", err)
		}
		m, err := ours(databaseURL)
		if err != nil {
			return err
		}
		defer closeMigrate(m)
		if err := m.Up(); err != nil && !errors.Is(err, migrate.ErrNoChange) {
			return fmt.Errorf("migrate converge up: %w", err)
		}
		return nil
	})
}

// Down removes our schema and then River's.
func Down(ctx context.Context, databaseURL string) error {
	return withLock(ctx, databaseURL, func(pool *pgxpool.Pool) error {
		m, err := ours(databaseURL)
		if err != nil {
			return err
		}
		defer closeMigrate(m)
		if err := m.Down(); err != nil && !errors.Is(err, migrate.ErrNoChange) {
			return fmt.Errorf("migrate converge down: %w", err)
		}
		rm, err := riverMigrator(pool)
		if err != nil {
			return err
		}
		if _, err := rm.Migrate(ctx, rivermigrate.DirectionDown, &rivermigrate.MigrateOpts{TargetVersion: -1}); err != nil {
			return fmt.Errorf("migrate river down: %w", err)
		}
		return nil
	})
}

// StatusOf reports the schema state of the database behind pool.
func StatusOf(ctx context.Context, pool *pgxpool.Pool) (Status, error) {
	var st Status
	latest, err := latestVersion()
	if err != nil {
		return st, err
	}
	st.Latest = latest
	var exists bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass('schema_migrations') IS NOT NULL`).Scan(&exists); err != nil {
		return st, fmt.Errorf("read schema status: %w", err)
	}
	if exists {
		var v int64
		err := pool.QueryRow(ctx, `SELECT version, dirty FROM schema_migrations LIMIT 1`).Scan(&v, &st.Dirty)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return st, fmt.Errorf("read schema version: %w", err)
		}
		st.Version = uint(v)
	}
	rm, err := riverMigrator(pool)
	if err != nil {
		return st, err
	}
	all := rm.AllVersions()
	if len(all) > 0 {
		st.RiverLatest = all[len(all)-1].Version
	}
	applied := map[int]bool{}
	var riverExists bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass('river_migration') IS NOT NULL`).Scan(&riverExists); err != nil {
		return st, fmt.Errorf("read river schema status: %w", err)
	}
	if riverExists {
		existing, err := rm.ExistingVersions(ctx)
		if err != nil {
			return st, fmt.Errorf("read river versions: %w", err)
		}
		for _, m := range existing {
			applied[m.Version] = true
			st.RiverVersion = max(st.RiverVersion, m.Version)
		}
	}
	for _, m := range all {
		if !applied[m.Version] {
			st.RiverMissing = append(st.RiverMissing, m.Version)
		}
	}
	st.Description = fmt.Sprintf("converge %d/%d (dirty=%t), river %d/%d", st.Version, st.Latest, st.Dirty, st.RiverVersion, st.RiverLatest)
	return st, nil
}

func latestVersion() (uint, error) {
	entries, err := files.ReadDir(".")
	if err != nil {
		return 0, fmt.Errorf("read embedded migrations: %w", err)
	}
	var latest uint
	for _, e := range entries {
		var v uint
		if _, err := fmt.Sscanf(e.Name(), "%d_", &v); err == nil && v > latest {
			latest = v
		}
	}
	return latest, nil
}

func riverMigrator(pool *pgxpool.Pool) (*rivermigrate.Migrator[pgx.Tx], error) {
	rm, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		return nil, fmt.Errorf("river migrator: %w", err)
	}
	return rm, nil
}

func ours(databaseURL string) (*migrate.Migrate, error) {
	src, err := iofs.New(files, ".")
	if err != nil {
		return nil, fmt.Errorf("open embedded migrations: %w", err)
	}
	u, err := url.Parse(databaseURL)
	if err != nil {
		return nil, fmt.Errorf("parse database url: %w", err)
	}
	u.Scheme = "pgx5"
	q := u.Query()
	q.Set("x-migrations-table", "schema_migrations")
	u.RawQuery = q.Encode()
	m, err := migrate.NewWithSourceInstance("iofs", src, u.String())
	if err != nil {
		return nil, fmt.Errorf("open migrator: %w", err)
	}
	return m, nil
}

func closeMigrate(m *migrate.Migrate) {
	_, _ = m.Close()
}

// withLock runs fn while holding the migration advisory lock on a dedicated
// connection.
func withLock(ctx context.Context, databaseURL string, fn func(*pgxpool.Pool) error) error {
	if !strings.Contains(databaseURL, "://") {
		return fmt.Errorf("database url must be a postgres:// URL")
	}
	cfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return fmt.Errorf("parse database url: %w", err)
	}
	cfg.MaxConns = 3
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer pool.Close()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, lockKey); err != nil {
		return fmt.Errorf("take migration lock: %w", err)
	}
	defer func() {
		_, _ = conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, lockKey)
	}()
	return fn(pool)
}
