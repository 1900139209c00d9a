package config

import (
	"fmt"
	"reflect"
	"strings"

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

// unmarshalerType is yaml.Unmarshaler: a type that reads its own nodes
// (Duration) is not checked by checkWholeNumbers.
var unmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()

// checkWholeNumbers returns a *KeyError naming the first key of the YAML
// node n, read into a value of type t at path, whose value is a number
// with a fraction or an exponent (`2.5`, `1e3`) where t has an integer:
// yaml.v3 would cut it to an integer without a word (max_attempts: 2.5
// read as 2). Aliases and `<<` merges are followed as YAML reads them.
func checkWholeNumbers(n *yaml.Node, t reflect.Type, path string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if n.Kind == yaml.DocumentNode {
		for _, c := range n.Content {
			if err := checkWholeNumbers(c, t, path); err != nil {
				return err
			}
		}
		return nil
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) {
		return nil
	}
	join := func(key string) string {
		if path == "" {
			return key
		}
		return path + "." + key
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!float" {
			return &KeyError{Key: path, Message: fmt.Sprintf("`%s` is not an integer (write it without a fraction or an exponent)", n.Value)}
		}
	case reflect.Slice, reflect.Array:
		if n.Kind == yaml.SequenceNode {
			for i, c := range n.Content {
				if err := checkWholeNumbers(c, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
					return err
				}
			}
		}
	case reflect.Map, reflect.Struct:
		if n.Kind != yaml.MappingNode {
			return nil
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.ShortTag() == "!!merge" {
				merged := []*yaml.Node{v}
				if v.Kind == yaml.SequenceNode {
					merged = v.Content
				}
				for _, m := range merged {
					if err := checkWholeNumbers(m, t, path); err != nil {
						return err
					}
				}
				continue
			}
			var vt reflect.Type
			if t.Kind() == reflect.Map {
				vt = t.Elem()
			} else if f, ok := yamlField(t, k.Value); ok {
				vt = f.Type
			} else {
				continue
			}
			if err := checkWholeNumbers(v, vt, join(k.Value)); err != nil {
				return err
			}
		}
	}
	return nil
}

// yamlField is the field of struct type t that the YAML key name is read
// into (its yaml tag's name, or its lower-cased name without a tag).
func yamlField(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if tag == "-" {
			continue
		}
		if tag == "" {
			tag = strings.ToLower(f.Name)
		}
		if tag == name {
			return f, true
		}
	}
	return reflect.StructField{}, false
}
