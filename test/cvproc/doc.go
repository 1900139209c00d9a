// Package cvproc runs the converge binary as a subprocess for end-to-end
// tests: Build builds cmd/converge once per test process, Start runs it
// with a command line and an environment (Env strips what would override a
// configuration file), and a Process is stopped with SIGTERM then SIGKILL,
// killed, waited for and read (its standard output and error are kept in
// memory; LogLine waits for a JSON log record). WaitHTTP waits for an
// endpoint such as /healthz to answer 200.
//
// Only tests import it; it imports nothing from this module but
// test/testkit.
package cvproc
