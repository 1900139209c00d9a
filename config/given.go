package config

import (
	"strings"

	"go.yaml.in/yaml/v3"
)

// A key left out of the configuration gets its default, but a key written
// out with a zero value is validated as given: `max_attempts: 0` stops
// start-up naming the key (SPEC §7: invalid configuration is refused) instead
// of quietly becoming the default. Parse records which keys the document
// sets; a configuration built in code sets none, and its zero values are
// defaulted as before.

// givenKeys are the dotted paths of the keys a parsed document sets to a
// value other than null ("kinds.build.max_attempts",
// "notifications[0].timeout").
type givenKeys map[string]bool

// collectGiven lists in out the keys of the YAML node n, whose path is
// prefix, that have a non-null value, as YAML reads the document (aliases
// and merged keys resolved).
func collectGiven(n *yaml.Node, prefix string, out givenKeys) {
	walkKeys(n, prefix, true, func(path string, _, v *yaml.Node) bool {
		if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
			out.forget(path) // `key:` or `key: null` leaves the key out
			return false
		}
		out[path] = true
		return true
	})
}

// forget takes key, and every key under it, out of g.
func (g givenKeys) forget(key string) {
	for k := range g {
		if k == key || strings.HasPrefix(k, key+".") || strings.HasPrefix(k, key+"[") {
			delete(g, k)
		}
	}
}

// absent reports whether key is left out of the configuration, so that
// its zero value is to be replaced by the default.
func (g givenKeys) absent(key string) bool { return !g[key] }
