// Command converge is the converge service: API, dashboard and workers, its
// schema migrations, a zero-configuration dev mode, and clients of its API.
//
// main builds a signal.NotifyContext and calls run, which parses the command
// line and the configuration, wires the store, River, the HTTP API and the
// dashboard together, and shuts them down in reverse order. run reads the
// environment only through its getenv argument, so tests call it directly. This
// is the only package that imports bench (the `converge bench` command).
package main
