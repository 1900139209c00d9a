package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/converge-run/converge/config"
)

func TestDatabaseConfig(t *testing.T) {
	t.Parallel()
	cfg, err := load(t, "", map[string]string{"DATABASE_URL": "postgres://a@pgbouncer:6432/c"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.RequestTimeout.Std() != 10*time.Second || cfg.Database.Pooler != config.PoolerNone || cfg.Database.Transaction() ||
		cfg.Database.StatementTimeout.Std() != 30*time.Second || cfg.Database.LockTimeout.Std() != 5*time.Second || cfg.Database.DirectURL != "" {
		t.Errorf("defaults: request_timeout %s, database %+v", cfg.RequestTimeout.Std(), cfg.Database)
	}
	if got := cfg.Database.MigrationURL(cfg.DatabaseURL); got != cfg.DatabaseURL {
		t.Errorf("MigrationURL without direct_url = %q, want database_url", got)
	}

	yaml := "request_timeout: 2s\ndatabase:\n  pooler: transaction\n  direct_url: postgres://a@db:5432/c\n  statement_timeout: 1500ms\n  lock_timeout: 250ms\n"
	cfg, err = load(t, yaml, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.RequestTimeout.Std() != 2*time.Second || !cfg.Database.Transaction() || cfg.Database.StatementTimeout.Std() != 1500*time.Millisecond ||
		cfg.Database.LockTimeout.Std() != 250*time.Millisecond || cfg.Database.MigrationURL("postgres://x@y/z") != "postgres://a@db:5432/c" {
		t.Errorf("from the file: request_timeout %s, database %+v", cfg.RequestTimeout.Std(), cfg.Database)
	}
	cfg, err = load(t, yaml, map[string]string{"DATABASE_DIRECT_URL": "postgres://b@db2:5432/c"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Database.DirectURL != "postgres://b@db2:5432/c" {
		t.Errorf("DATABASE_DIRECT_URL did not override direct_url: %q", cfg.Database.DirectURL)
	}
}

func TestDatabaseConfigInvalid(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, yaml, key, message string
	}{
		{"pooler unknown", "database: {pooler: session}\n", "database.pooler", "must be none or transaction"},
		{"direct_url not postgres", "database: {direct_url: 'mysql://s3cret@db/c'}\n", "database.direct_url", "must be a postgres:// URL"},
		{"statement_timeout negative", "database: {statement_timeout: -1s}\n", "database.statement_timeout", "at least 1ms"},
		{"lock_timeout negative", "database: {lock_timeout: -5s}\n", "database.lock_timeout", "at least 1ms"},
		// Over PostgreSQL's limit it refused every connection: the
		// process retried for ever, the database "unreachable".
		{"statement_timeout over PostgreSQL's limit", "database: {statement_timeout: 25d}\n", "database.statement_timeout", "at most 2147483647ms"},
		{"lock_timeout over PostgreSQL's limit", "database: {lock_timeout: 1000000h}\n", "database.lock_timeout", "at most 2147483647ms"},
		{"lock_timeout not a duration", "database: {lock_timeout: soon}\n", "database.lock_timeout", ""},
		{"request_timeout negative", "request_timeout: -1s\n", "request_timeout", "at least 1ms"},
		{"unknown database key", "database: {poolr: transaction}\n", "database.poolr", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := load(t, tc.yaml, nil)
			if err == nil || !strings.Contains(err.Error(), tc.key) || !strings.Contains(err.Error(), tc.message) {
				t.Fatalf("error %v, want one naming %s (%s)", err, tc.key, tc.message)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Errorf("error repeats a secret: %v", err)
			}
		})
	}
}
