// Package pgserver finds a PostgreSQL server on this machine or starts a
// private one from the machine's PostgreSQL binaries.
//
// Find looks for the conventional server on 127.0.0.1:5432. Start runs a
// private cluster in a data folder of its own: it is what `converge dev`
// uses when no DATABASE_URL is given, and what the test helpers fall back to
// when no server is running. CreateDatabase and DropDatabase are the small
// administrative statements both need.
//
// PostgreSQL refuses to run as root, so when the calling process is root the
// private cluster is initialized and run as the `postgres` operating-system
// user.
package pgserver
