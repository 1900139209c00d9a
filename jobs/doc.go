// Package jobs runs converge's work on River: the client with one queue per
// kind, the worker that drives one attempt of a run against its target
// (checking supersession and holding the stream's lease while the call is in
// flight), and the reconciler that rescues runs whose worker vanished.
package jobs
