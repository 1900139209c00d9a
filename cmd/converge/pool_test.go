package main

import (
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/converge-run/converge/config"
)

// TestPoolConfig checks the pool under each database.pooler: timeouts on
// every connection without a pooler; with a transaction pooler nothing
// left on a server connection (no start-up parameters, no named prepared
// statements) and a URL that asks for another query mode refused, naming
// database_url.
func TestPoolConfig(t *testing.T) {
	t.Parallel()
	cfg := &config.Config{Database: config.Database{Pooler: config.PoolerNone,
		StatementTimeout: config.Duration(1500 * time.Millisecond), LockTimeout: config.Duration(250 * time.Millisecond)}}
	pc, err := poolConfig(cfg, "postgres://u@db:5432/c", appMode{Worker: true})
	if err != nil {
		t.Fatal(err)
	}
	if pc.ConnConfig.RuntimeParams["statement_timeout"] != "1500" || pc.ConnConfig.RuntimeParams["lock_timeout"] != "250" ||
		pc.ConnConfig.DefaultQueryExecMode != pgx.QueryExecModeCacheStatement || pc.MaxConns != 30 {
		t.Errorf("pooler none: runtime params %v, mode %v, max conns %d", pc.ConnConfig.RuntimeParams, pc.ConnConfig.DefaultQueryExecMode, pc.MaxConns)
	}
	if opts := timeoutOptions(cfg); len(opts) != 0 {
		t.Errorf("pooler none: %d timeout options, want none (the connection carries the timeouts)", len(opts))
	}
	if opts := storeOptions(cfg); len(opts) != 1 {
		t.Errorf("pooler none: %d store options, want the schema check alone", len(opts))
	}

	for _, mode := range []string{"exec", "simple_protocol"} {
		_, err := poolConfig(cfg, "postgres://u@db:5432/c?default_query_exec_mode="+mode, appMode{})
		if err == nil || !strings.Contains(err.Error(), "database_url") || !strings.Contains(err.Error(), "database.pooler: transaction") {
			t.Errorf("pooler none with default_query_exec_mode=%s: %v, want a refusal naming database_url and the pooler", mode, err)
		}
	}

	cfg.Database.Pooler = config.PoolerTransaction
	pc, err = poolConfig(cfg, "postgres://u@pgbouncer:6432/c", appMode{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := pc.ConnConfig.RuntimeParams["statement_timeout"]; ok || pc.ConnConfig.RuntimeParams["lock_timeout"] != "" ||
		pc.ConnConfig.DefaultQueryExecMode != pgx.QueryExecModeCacheDescribe {
		t.Errorf("pooler transaction: runtime params %v, mode %v", pc.ConnConfig.RuntimeParams, pc.ConnConfig.DefaultQueryExecMode)
	}
	if opts := timeoutOptions(cfg); len(opts) != 1 {
		t.Errorf("pooler transaction: %d timeout options, want the per-transaction timeouts", len(opts))
	}
	for _, mode := range []string{"exec", "simple_protocol", "cache_statement"} {
		_, err := poolConfig(cfg, "postgres://u@pgbouncer:6432/c?default_query_exec_mode="+mode, appMode{})
		if err == nil || !strings.Contains(err.Error(), "database_url") || !strings.Contains(err.Error(), mode) {
			t.Errorf("pooler transaction with default_query_exec_mode=%s: %v, want a refusal naming database_url", mode, err)
		}
	}
	if _, err := poolConfig(cfg, "postgres://u@pgbouncer:6432/c?default_query_exec_mode=cache_describe", appMode{}); err != nil {
		t.Errorf("pooler transaction with cache_describe: %v", err)
	}

	if _, err := migrationURL(cfg); err == nil || !strings.Contains(err.Error(), "database.direct_url") {
		t.Errorf("migrationURL with pooler transaction and no direct_url: %v, want a refusal naming database.direct_url", err)
	}
	cfg.Database.DirectURL = "postgres://u@db:5432/c"
	if u, err := migrationURL(cfg); err != nil || u != cfg.Database.DirectURL {
		t.Errorf("migrationURL = %q, %v; want direct_url", u, err)
	}
}
