// Package store holds every SQL statement and transaction of converge. It
// speaks PostgreSQL through pgx, enqueues and cancels River jobs in the same
// transactions as its own rows, and translates database errors into domain
// errors at its boundary. It is plain data access: built in one step
// (New, with the River client whose *Tx functions it calls), it starts no
// goroutine; what runs in the background (group commit, recording outcomes
// later, the reconciler) is package jobs'.
//
// Layout: sql.go names the SQL fragments more than one statement uses (the
// status lists, the duration of an attempt, the supersede update, the one
// lock order of streams); each hot transaction is one file, load → plan
// (pure) → write, for one call and for many in one transaction: accept.go
// (EventAccept, EventAcceptMany), begin.go (AttemptBegin, AttemptBeginMany),
// finish.go (AttemptFinish, AttemptFinishMany); riverjob.go holds every call
// of River's API and every statement on river_job.
//
// The convergence guarantees live here:
//   - accepting version W of a stream locks the stream row, ends every
//     unfinished run of the stream as superseded and cancels its job, all in
//     the transaction that records W (G4, G5);
//   - an attempt begins only while its run is the stream's latest accepted
//     version and it holds the stream's lease, a row-level lease with an
//     expiry in database time that the worker renews while the call is in
//     flight (G2, G3);
//   - a run's completion raises the stream's applied version with GREATEST
//     in the same transaction (G8), and a trigger refuses any change to a
//     terminal run (G6).
package store
