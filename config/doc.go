// Package config reads converge's configuration: a YAML file, environment
// overrides and defaults for everything else. Load validates the result and
// names the offending key in its error.
//
// cmd/converge loads it (handing Load the environment as a getenv function) and
// passes each package below it the parts it needs; bench uses its defaults.
package config
