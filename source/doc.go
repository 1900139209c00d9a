// Package source receives deliveries from event sources (SPEC §12): it
// verifies their signatures (GitHub's X-Hub-Signature-256, the Standard
// Webhooks scheme), reads CloudEvents in the HTTP binding's structured and
// binary modes, and evaluates each source's CEL rules into events and
// workflow runs, which store records with the delivery in one transaction.
//
// It imports only store and the root package (a depguard rule holds the
// line); cel-go is its dependency alone. The HTTP edge (api) hands it a
// source name, the request headers and the body already limited to
// max_payload_bytes; it answers in domain terms (converge.DeliveryResult or
// an error with an application code).
package source
