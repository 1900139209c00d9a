// Package stress proves converge's convergence guarantees (SPEC G2–G8)
// with real processes: one `converge api` and several `converge worker`
// processes on one fresh database, a fake HTTP target in the test process
// that logs every call, and the invariant checker (test/invariant) over
// that log and the database. Variants kill workers with SIGKILL while they
// work, and exercise run cancellation, the resource view and crash
// recovery end to end.
//
// The default size finishes in well under three minutes on two cores; run
// bigger with
//
//	go test ./test/stress -stress.big
//
// or STRESS_SCALE=n (streams × n). The tests need PostgreSQL (see
// test/pgtest) and are skipped under -short.
package stress
