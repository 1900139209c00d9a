// Package invariant checks converge's guarantees after the fact, from two
// independent records of what happened: the log of a fake target (every
// call it received, with start and end times taken in the target's own
// process) and the database (events, runs, attempts, streams, dead letters).
//
// A test serves a Target (or records Calls itself), drives converge, waits
// until it has settled, and calls Check:
//
//	tgt := invariant.NewTarget(invariant.TargetConfig{MaxLatency: 100 * time.Millisecond, TransientRate: 0.2})
//	srv := httptest.NewServer(tgt)
//	... run converge against srv.URL, wait until it converged ...
//	rep, err := invariant.Check(ctx, pool, invariant.Params{Calls: tgt.Calls()})
//	if err != nil { t.Fatal(err) }
//	for _, v := range rep.Violations { t.Error(v) }
//
// The rules, and what each is checked against, are listed on Check. The
// package reads the database and never changes it (the G6 trigger probe
// runs in a transaction that is rolled back).
package invariant
