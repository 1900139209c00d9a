// Package bench measures converge against anchors taken in the same run on
// the same machine and database server: bare River for the worker pipeline,
// one River insert per transaction for ingest, every-event-runs River for a
// storm of versions, and the simplest indexed page for dead-letter lists.
// Every benchmark works in a scratch database of its own, created on the
// given server and dropped at the end, so it never touches real data.
//
// A benchmark returns a Result: the measured rate, the anchor's rate, their
// ratio, latency percentiles and details, which `converge bench` prints as
// a table and, with --json, as one JSON object on the last line. Because the
// machines these run on are shared and noisy, goals are stated as ratios to
// the anchor, never as absolute numbers (docs/benchmarks.md).
package bench
