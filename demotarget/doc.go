// Package demotarget is an HTTP target that simulates builds and deploys:
// configurable latency and transient and permanent failure rates, for demos,
// `converge dev` and benchmarks. A payload may also ask for an outcome with
// {"fail": "transient"} or {"fail": "permanent"}.
package demotarget
