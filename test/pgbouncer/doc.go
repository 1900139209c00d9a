// Package pgbouncer runs a private PgBouncer in transaction mode in front
// of a test PostgreSQL server, for the tests of database.pooler:
// transaction (test/pooler, and test/e2e under make test-pgbouncer). It
// writes its own configuration (a free port on 127.0.0.1, pool_mode =
// transaction, every database forwarded, trust authentication) into a
// temporary folder and runs the machine's pgbouncer binary, as the
// postgres user when the tests run as root (PgBouncer refuses to run as
// root).
package pgbouncer
