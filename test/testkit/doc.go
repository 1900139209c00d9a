// Package testkit holds small helpers that tests across the module share:
// polling with a deadline (Eventually, WaitFor), a buffer that a
// subprocess or server can write while the test reads it (Buffer), and a
// configuration file in a folder of the test's (ConfigFile).
//
// It imports nothing from this module, so any test package can use it;
// non-test code never imports it.
package testkit
