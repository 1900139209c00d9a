// Package migrations holds converge's schema as embedded golang-migrate SQL
// files and applies it together with River's schema. Every entry point
// takes a PostgreSQL advisory lock first, so any number of processes may
// migrate one database at the same time.
package migrations
