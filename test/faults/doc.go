// Package faults is converge's fault suite (SPEC §15, issue 20): a private
// PostgreSQL cluster (initdb into a temporary folder, its own port), one
// api and three worker processes of the real binary, a recording target
// and a client that keeps 30 streams of rising versions coming, while
// phases inject faults: worker and api SIGKILLs, `pg_ctl restart -m
// immediate`, pg_terminate_backend loops, SIGSTOP of a worker past
// rescue_after, long table locks, a low max_connections, a read-only
// primary, and a storm of all of them. After each phase the suite drains
// and checks, from the client's log of acknowledged events, the target's
// log, the processes' logs and the database (test/invariant): lost,
// unexpected, new-then-old, overlapping attempts, calls after a run was
// terminal, repeated successes, stuck runs, applied_version regressions,
// process exits, 5xx without a problem body, secrets in logs. It prints a
// table of the faults injected and of each count.
//
// `go test ./test/faults` runs a smoke of it (a few faults of each kind,
// under a minute); `make faults` (FAULTS_FULL=1) the full run, whose
// numbers are in docs/reliability.md. Process exits (a process that exits
// by itself while the database is down) are counted; they fail the run
// only with FAULTS_STRICT=1. The package's other tests check single
// reliability rules through the real binary: outcome writes retried over
// a database restart, supersession without notifications, held runs
// across kill -9.
package faults
