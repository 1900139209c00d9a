// Package telemetry holds converge's Prometheus metrics: the process-local
// counters, histograms and gauges of SPEC §14 (Metrics), and the gauges read
// from the database on every scrape (DatabaseCollector), which give the same
// values from every process.
//
// It imports only the root package, Prometheus' client and pgx, so that
// store, jobs, api and cmd can all depend on it. cmd builds one Metrics per
// process with NewMetrics and hands it to the layers that record; a nil
// *Metrics records nothing, so tests and tools may leave it out.
//
// Label values are bounded: every label takes its value from a fixed set
// (the configured kinds, workflows and sources, and the statuses, outcomes,
// reasons and tables of the spec), and a value outside its set is folded to
// one fixed value ("unknown" for a kind, workflow or source, "other" for
// the rest). No resource name or id ever becomes a label.
//
// OpenTelemetry tracing lives here too (tracing.go): StartTracing installs
// the SDK with an OTLP/HTTP exporter when the standard OTEL_ environment
// asks for it, and the helpers carry a run's stored W3C traceparent from
// its creation to its attempts.
package telemetry
