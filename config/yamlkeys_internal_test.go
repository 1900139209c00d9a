package config

import (
	"slices"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestWalkKeys: the one walk of a YAML document's keys serves both its
// readers. Resolved (which keys a document gives, collectGiven), an alias
// is the node it names and merged keys stand at the path they merge into,
// before the mapping's own; as written (which key an error's line names,
// collectKeys), every key in order, `<<` too, with its line, and no alias
// followed.
func TestWalkKeys(t *testing.T) {
	t.Parallel()
	const doc = `base: &b
  x: 1
  y: {z: 2}
list:
  - *b
  - {<<: [*b], x: 3, w: null}
`
	var n yaml.Node
	if err := yaml.Unmarshal([]byte(doc), &n); err != nil {
		t.Fatal(err)
	}
	walk := func(resolve bool) []string {
		var got []string
		walkKeys(&n, "", resolve, func(path string, k, v *yaml.Node) bool {
			got = append(got, path)
			return v.Tag != "!!null"
		})
		return got
	}
	if got, want := walk(true), []string{
		"base", "base.x", "base.y", "base.y.z", "list",
		"list[0].x", "list[0].y", "list[0].y.z",
		"list[1].x", "list[1].y", "list[1].y.z", "list[1].x", "list[1].w",
	}; !slices.Equal(got, want) {
		t.Errorf("resolved: %q, want %q", got, want)
	}
	if got, want := walk(false), []string{
		"base", "base.x", "base.y", "base.y.z", "list", "list[1].<<", "list[1].x", "list[1].w",
	}; !slices.Equal(got, want) {
		t.Errorf("as written: %q, want %q", got, want)
	}

	var keys []keyPos
	collectKeys(&n, "", &keys)
	if len(keys) != 8 || keys[1] != (keyPos{line: 2, path: "base.x", name: "x", value: "1"}) ||
		keys[6] != (keyPos{line: 6, path: "list[1].x", name: "x", value: "3"}) {
		t.Errorf("collectKeys: %+v", keys)
	}
	given := givenKeys{}
	collectGiven(&n, "", given)
	if !given["list[0].y.z"] || !given["list[1].x"] || given["list[1].w"] || given["list[1].<<"] || len(given) != 11 {
		t.Errorf("collectGiven: %v", given)
	}
}
