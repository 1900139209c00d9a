// Package outage tests, through the real binary, how converge lives
// through a database that is down, read-only or too slow (SPEC §15):
// processes started while PostgreSQL is stopped stay up (/healthz 200,
// /readyz 503 with the reason) and become ready when it starts; a crash
// (pg_ctl stop -m immediate, then crash recovery) loses no acknowledged
// event and the processes carry on, and a run whose job River was left
// running with no worker on it resumes as soon as the database is back
// (the reconciler's quick pass), with the default rescue_after; requests
// during an outage are answered 503 unavailable with Retry-After; `migrate
// up --wait` waits for the database; a read-only primary refuses writes
// with 503 until it is writable again; a lock held on converge_streams
// makes POST /v1/events answer 503 within request_timeout or
// database.lock_timeout. The outages are made on private PostgreSQL
// clusters (pgserver), stopped and started by the tests.
package outage
