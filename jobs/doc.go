// Package jobs runs everything of converge that works in the background,
// each part a service with Start/Stop, wired together by Service (one for
// serve, worker, dev and bench): the River client with one queue per kind;
// the worker that drives one attempt of a run against its target (checking
// supersession and holding the stream's lease while the call is in flight);
// the group commit that gathers concurrent accepts, begins and finishes
// into batches committed by the store's set-based functions, and records
// successful outcomes in the background; the reconciler that rescues runs
// whose worker vanished; and the promoter of scheduled jobs.
package jobs
