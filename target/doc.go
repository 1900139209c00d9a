// Package target holds the things a worker calls for one attempt of a run:
// an HTTP endpoint ([HTTP]) or a local command ([Exec]), both behind the
// [Target] interface.
//
// A target knows its protocol, so it is the layer that classifies a failure:
// every error a target returns is a *converge.AttemptError whose class says
// whether the run may be retried, with the HTTP status or exit code and, when
// the target asked for one, the least delay before the next attempt.
//
// Cancellation of the caller's context (supersession, an operator's cancel,
// shutdown) aborts the call promptly; the error then wraps ctx.Err(), so
// errors.Is(err, ctx.Err()) tells it apart from the target's own timeout,
// which wraps [ErrTimeout] instead.
package target
