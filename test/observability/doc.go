// Package observability checks deploy/observability/ against the metrics
// that converge exports: the alert rules parse with Prometheus' own rule
// parser, every PromQL expression of the rules and of the Grafana
// dashboard parses with its PromQL parser and names only metrics that
// telemetry.NewMetrics and telemetry.DatabaseCollector export, and the
// rules' unit tests (alerts_test.yml) pass under promtool when it can be
// built.
//
// It is a module of its own so that Prometheus' server module stays out of
// converge's go.mod. Run it from the repository root with
//
//	(cd test/observability && TEST_REQUIRE_DB=1 go test -count=1 ./...)
//
// The promtool test runs when PROMTOOL names a promtool binary, one is on
// PATH, or OBSERVABILITY_BUILD_PROMTOOL=1 lets the test build it (go
// install, five minutes at most); otherwise it skips saying so.
package observability
