// Package converge holds the domain vocabulary of the converge service:
// events, runs, attempts, dead letters, their statuses, the error type with
// its codes, and pure rules such as the retry delay and resource key
// validation. It imports nothing from this module; every other package
// speaks in its terms.
package converge
