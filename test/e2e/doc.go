// Package e2e tests the built converge binary from the outside: it builds
// cmd/converge once, runs its commands as subprocesses against a database
// of each test's own and a fake target server inside the test, and talks to
// it over HTTP and signals, as an operator would.
package e2e
