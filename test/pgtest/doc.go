// Package pgtest hands each test package its own migrated PostgreSQL
// database, and each test that needs isolation a database of its own.
//
// A test package opts in with a TestMain:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
// and its tests call URL, Pool or NewDatabase (EmptyDatabase for one without
// a schema; OpenPool for a pool on either). Main finds a server, in this
// order: TEST_DATABASE_URL, DATABASE_URL, a server on 127.0.0.1:5432
// (pgserver.Find), or else a private throwaway cluster started from the
// machine's PostgreSQL binaries (pgserver.Start) and stopped when Main
// returns. On that server it builds, once for all test processes, a
// template database converge_tmpl_<hash of the migration files> migrated
// with migrations.Up, and then creates the package's database from it
// (CREATE DATABASE ... TEMPLATE, a file copy), dropping it at the end.
//
// When no server can be had, tests that need one skip, unless
// TEST_REQUIRE_DB=1, in which case Main prints the reason and exits 1 (CI
// sets it, so a missing database never passes as skipped tests).
//
// Keep pools small: the machines have 2 cores, and several test packages
// run at once.
package pgtest
