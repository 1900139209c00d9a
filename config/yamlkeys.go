package config

import (
	"fmt"

	"go.yaml.in/yaml/v3"
)

// walkKeys calls visit for every key of the mappings in the YAML node n,
// whose path is prefix, with the key's dotted path ("kinds.build.target",
// "notifications[0].url"), the key's node and its value's node (as written,
// an alias not resolved), and goes on into the value unless visit returns
// false. With resolve, the document is walked as YAML reads it: an alias as
// the node it names, and the mappings a `<<` key merges (one, or a list of
// them) at the path of the mapping they merge into, before its own keys,
// which override them; the `<<` keys themselves are not visited. Without
// resolve, it is walked as written: every key in order (`<<` too), aliases
// not followed.
func walkKeys(n *yaml.Node, prefix string, resolve bool, visit func(path string, k, v *yaml.Node) bool) {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			walkKeys(c, prefix, resolve, visit)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			walkKeys(c, fmt.Sprintf("%s[%d]", prefix, i), resolve, visit)
		}
	case yaml.MappingNode:
		if resolve {
			for i := 0; i+1 < len(n.Content); i += 2 {
				if k, v := n.Content[i], n.Content[i+1]; k.Tag == "!!merge" {
					walkMerged(v, prefix, visit)
				}
			}
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if resolve && k.Tag == "!!merge" {
				continue
			}
			path := k.Value
			if prefix != "" {
				path = prefix + "." + k.Value
			}
			if visit(path, k, v) {
				walkKeys(v, path, resolve, visit)
			}
		}
	case yaml.AliasNode:
		if resolve && n.Alias != nil {
			walkKeys(n.Alias, prefix, resolve, visit)
		}
	}
}

// walkMerged walks, for walkKeys with resolve, what `<<: v` merges into the
// mapping at prefix: v is one mapping (or an alias of one) or a list of
// them.
func walkMerged(v *yaml.Node, prefix string, visit func(path string, k, v *yaml.Node) bool) {
	if v.Kind == yaml.SequenceNode {
		for _, c := range v.Content {
			walkKeys(c, prefix, true, visit)
		}
		return
	}
	walkKeys(v, prefix, true, visit)
}
