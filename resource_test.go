package converge_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/converge-run/converge"
)

// TestValidateKind checks ValidateKind against the pattern configured kind
// names had to match before it existed.
func TestValidateKind(t *testing.T) {
	t.Parallel()
	pattern := regexp.MustCompile(`^[a-z][a-z0-9_-]{0,62}$`)
	for _, name := range []string{
		"", "build", "deploy", "b", "a-b_c9", "Build", "9build", "-x", "_x", "bu ild", "build\n", "b\x00", "é",
		strings.Repeat("a", 63), strings.Repeat("a", 64), "a/b", "a.b",
	} {
		err := converge.ValidateKind(name)
		if ok := err == nil; ok != pattern.MatchString(name) {
			t.Errorf("ValidateKind(%q) = %v, want valid = %v", name, err, !ok)
		}
	}
}

// TestValidateVersion checks that only positive versions are valid.
func TestValidateVersion(t *testing.T) {
	t.Parallel()
	for v, ok := range map[int64]bool{-1 << 63: false, -1: false, 0: false, 1: true, 42: true, 1<<63 - 1: true} {
		if err := converge.ValidateVersion(v); (err == nil) != ok {
			t.Errorf("ValidateVersion(%d) = %v, want valid = %v", v, err, ok)
		}
	}
}
