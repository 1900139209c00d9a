package config

import (
	"fmt"
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
// prefix, that have a non-null value.
func collectGiven(n *yaml.Node, prefix string, out givenKeys) {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			collectGiven(c, prefix, out)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			collectGiven(c, fmt.Sprintf("%s[%d]", prefix, i), out)
		}
	case yaml.MappingNode:
		// Merged keys first: a key written in the mapping overrides
		// them, a null one too, wherever it stands (YAML's merge rule).
		for i := 0; i+1 < len(n.Content); i += 2 {
			if k, v := n.Content[i], n.Content[i+1]; k.Tag == "!!merge" {
				collectMerged(v, prefix, out)
			}
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Tag == "!!merge" {
				continue
			}
			path := k.Value
			if prefix != "" {
				path = prefix + "." + k.Value
			}
			if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
				out.forget(path) // `key:` or `key: null` leaves the key out
				continue
			}
			out[path] = true
			collectGiven(v, path, out)
		}
	case yaml.AliasNode:
		if n.Alias != nil {
			collectGiven(n.Alias, prefix, out)
		}
	}
}

// collectMerged lists the keys that `<<: v` sets in the mapping at prefix:
// v is one mapping (or an alias of one) or a list of them.
func collectMerged(v *yaml.Node, prefix string, out givenKeys) {
	if v.Kind == yaml.SequenceNode {
		for _, c := range v.Content {
			collectGiven(c, prefix, out)
		}
		return
	}
	collectGiven(v, prefix, out)
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
