// Package testkit holds small helpers that tests across the module share:
// polling with a deadline (Eventually, WaitFor) and a buffer that a
// subprocess or server can write while the test reads it (Buffer).
//
// It imports nothing from this module, so any test package can use it;
// non-test code never imports it.
package testkit
