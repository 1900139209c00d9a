// Package sourcecheck tests converge's CloudEvents source with the official
// CloudEvents Go SDK (github.com/cloudevents/sdk-go/v2) as the sender, in
// both modes of the HTTP binding. It is a module of its own so that the SDK
// stays out of the product's go.mod (like test/deploycheck and
// test/observability).
package sourcecheck
