package config

import (
	"net/url"
	"time"
)

// Poolers that may stand between converge and PostgreSQL
// (database.pooler, SPEC §15).
const (
	// PoolerNone: converge's connections are PostgreSQL sessions of its
	// own; timeouts are set on each connection and River listens for
	// notifications.
	PoolerNone = "none"
	// PoolerTransaction: a pooler in transaction mode (PgBouncer's
	// pool_mode = transaction) hands a server connection out per
	// transaction, so nothing may stay on one: no named prepared
	// statements, timeouts set per transaction, no LISTEN (River polls, or
	// listens over direct_url), migrations over direct_url.
	PoolerTransaction = "transaction"
)

// Defaults of the database and request bounds.
const (
	DefaultRequestTimeout   = 10 * time.Second
	DefaultStatementTimeout = 30 * time.Second
	DefaultLockTimeout      = 5 * time.Second
	// MaxDatabaseTimeout is the longest statement_timeout or lock_timeout
	// PostgreSQL takes (INT_MAX milliseconds, about 24.8 days): a longer
	// one makes it refuse every connection (or transaction) it is set on.
	MaxDatabaseTimeout = 2147483647 * time.Millisecond
)

// Database says how converge reaches PostgreSQL beyond database_url.
type Database struct {
	// Pooler is PoolerNone (the default) or PoolerTransaction.
	Pooler string `yaml:"pooler"`
	// DirectURL reaches PostgreSQL without the pooler (env
	// DATABASE_DIRECT_URL): migrations, and River's LISTEN under a
	// transaction pooler.
	DirectURL string `yaml:"direct_url"`
	// StatementTimeout and LockTimeout bound every statement and every
	// lock wait of converge's connections (default 30s and 5s).
	StatementTimeout Duration `yaml:"statement_timeout"`
	LockTimeout      Duration `yaml:"lock_timeout"`
}

// Transaction reports whether converge runs behind a pooler in
// transaction mode.
func (d Database) Transaction() bool { return d.Pooler == PoolerTransaction }

// MigrationURL is the URL migrations run over: direct_url when set (a
// pooler in transaction mode cannot hold golang-migrate's session advisory
// lock), else databaseURL.
func (d Database) MigrationURL(databaseURL string) string {
	if d.DirectURL != "" {
		return d.DirectURL
	}
	return databaseURL
}

// finishDatabase applies the defaults of request_timeout and database and
// validates them.
func (c *Config) finishDatabase() error {
	if c.RequestTimeout == 0 && c.given.absent("request_timeout") {
		c.RequestTimeout = Duration(DefaultRequestTimeout)
	}
	if c.RequestTimeout < Duration(time.Millisecond) {
		return &KeyError{"request_timeout", "must be at least 1ms"}
	}
	d := &c.Database
	switch d.Pooler {
	case "":
		if !c.given.absent("database.pooler") {
			return &KeyError{"database.pooler", "must be none or transaction"}
		}
		d.Pooler = PoolerNone
	case PoolerNone, PoolerTransaction:
	default:
		return &KeyError{"database.pooler", "must be none or transaction"}
	}
	if d.DirectURL != "" {
		u, err := url.Parse(d.DirectURL)
		if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
			return &KeyError{"database.direct_url", "must be a postgres:// URL"}
		}
	}
	if d.StatementTimeout == 0 && c.given.absent("database.statement_timeout") {
		d.StatementTimeout = Duration(DefaultStatementTimeout)
	}
	if d.StatementTimeout < Duration(time.Millisecond) {
		return &KeyError{"database.statement_timeout", "must be at least 1ms"}
	}
	if d.StatementTimeout > Duration(MaxDatabaseTimeout) {
		return &KeyError{"database.statement_timeout", "must be at most 2147483647ms (about 24 days), PostgreSQL's limit"}
	}
	if d.LockTimeout == 0 && c.given.absent("database.lock_timeout") {
		d.LockTimeout = Duration(DefaultLockTimeout)
	}
	if d.LockTimeout < Duration(time.Millisecond) {
		return &KeyError{"database.lock_timeout", "must be at least 1ms"}
	}
	if d.LockTimeout > Duration(MaxDatabaseTimeout) {
		return &KeyError{"database.lock_timeout", "must be at most 2147483647ms (about 24 days), PostgreSQL's limit"}
	}
	return nil
}
