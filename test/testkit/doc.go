// Package testkit holds small helpers that tests across the module share:
// polling with a deadline (Eventually, WaitFor), a buffer that a
// subprocess or server can write while the test reads it (Buffer), a
// configuration file in a folder of the test's (ConfigFile), and an HTTP
// client for JSON APIs that reads whole answers (Client, Answer).
//
// It imports nothing from this module, so any test package can use it;
// non-test code never imports it.
package testkit
