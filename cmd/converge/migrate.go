package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/converge-run/converge/config"
	"github.com/converge-run/converge/migrations"
	"github.com/converge-run/converge/store"
)

// defaultMigrateWait is how long migrate up waits for the database by
// default (SPEC §15).
const defaultMigrateWait = 60 * time.Second

func (e *env) migrateCommand() *cobra.Command {
	var configPath string
	var wait time.Duration
	cmd := &cobra.Command{Use: "migrate", Short: "Manage the database schema (ours and River's)"}
	cmd.PersistentFlags().StringVar(&configPath, "config", "", "configuration file (default $CONVERGE_CONFIG)")
	up := &cobra.Command{
		Use: "up", Short: "Apply every migration (safe to run concurrently); waits for the database up to --wait", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if wait < 0 {
				return &usageError{fmt.Errorf("--wait must not be negative (0: try once)")}
			}
			cfg, err := e.loadAdminConfig(configPath)
			if err != nil {
				return err
			}
			u, err := migrationURL(cfg)
			if err != nil {
				return err
			}
			logger := newLogger(e.stderr, cfg.LogLevel, "json")
			if err := migrateWaiting(cmd.Context(), u, wait, logger); err != nil {
				return err
			}
			fmt.Fprintln(e.stdout, "schema is up to date")
			return nil
		},
	}
	up.Flags().DurationVar(&wait, "wait", defaultMigrateWait, "how long to wait for the database to accept connections (0: do not wait)")
	cmd.AddCommand(up, &cobra.Command{
		Use: "down", Short: "Remove converge's and River's schema", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := e.loadAdminConfig(configPath)
			if err != nil {
				return err
			}
			u, err := migrationURL(cfg)
			if err != nil {
				return err
			}
			if err := migrations.Down(cmd.Context(), u); err != nil {
				return err
			}
			fmt.Fprintln(e.stdout, "schema removed")
			return nil
		},
	}, &cobra.Command{
		Use: "status", Short: "Print the schema version", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := e.loadAdminConfig(configPath)
			if err != nil {
				return err
			}
			pool, err := openPool(cmd.Context(), cfg, appMode{})
			if err != nil {
				return err
			}
			defer pool.Close()
			st, err := migrations.StatusOf(cmd.Context(), pool)
			if err != nil {
				return err
			}
			fmt.Fprintln(e.stdout, st.Description)
			if !st.Current() {
				fmt.Fprintln(e.stdout, "pending: run `converge migrate up`")
			}
			return nil
		},
	})
	return cmd
}

// migrationURL is the URL migrations run over: database.direct_url when
// set. Behind a pooler in transaction mode there must be one: the
// migrations hold a session advisory lock, which a pooler that hands out a
// server connection per transaction would leave on some connection.
func migrationURL(cfg *config.Config) (string, error) {
	if cfg.Database.Transaction() && cfg.Database.DirectURL == "" {
		return "", &config.KeyError{Key: "database.direct_url",
			Message: "is required to migrate with database.pooler: transaction (set DATABASE_DIRECT_URL to a URL that bypasses the pooler)"}
	}
	return cfg.Database.MigrationURL(cfg.DatabaseURL), nil
}

// migrateWaiting applies the migrations over databaseURL, waiting up to
// wait for the database to accept connections (unreachable, starting up,
// recovering): it tries again, at most 5 s apart, while the failure is the
// database's unavailability (store.IsUnavailable) and wait has not passed.
// The last pause is cut to what is left of wait, so that the last try is
// made when wait ends, not up to a pause before it.
func migrateWaiting(ctx context.Context, databaseURL string, wait time.Duration, logger *slog.Logger) error {
	deadline := time.Now().Add(wait)
	delay := 250 * time.Millisecond
	for {
		err := waitPing(ctx, databaseURL, time.Until(deadline))
		if err == nil {
			if err = migrations.Up(ctx, databaseURL); err == nil {
				return nil
			}
		}
		// A table or column missing is a migration's own failure, not a
		// database to wait for.
		left := time.Until(deadline)
		if !store.IsUnavailable(err) || store.IsSchemaNotCurrent(err) || left <= 0 {
			if store.IsUnavailable(err) {
				return fmt.Errorf("the database did not accept connections within --wait %s: %s", wait, redactErr(err))
			}
			return err
		}
		pause := min(delay, left)
		logger.Warn("database unavailable; migrate up retries", "retry_in", pause.String(), "error", redactErr(err))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pause):
		}
		delay = min(2*delay, startRetryMax)
	}
}

// waitPing connects to databaseURL once, within at most startRetryMax (or
// what is left of the wait, if less but positive; at least 1 s, so that the
// try made as the wait ends has time to connect).
func waitPing(ctx context.Context, databaseURL string, left time.Duration) error {
	timeout := startRetryMax
	if left > 0 {
		timeout = min(timeout, max(left, time.Second))
	}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := pgx.Connect(pctx, databaseURL)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			return fmt.Errorf("connect to database: %w", err)
		}
		return err
	}
	return conn.Close(context.WithoutCancel(ctx))
}
