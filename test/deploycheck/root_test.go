package deploycheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// repoRoot returns the absolute path of the repository root (the folder holding
// go.mod), two levels above this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatalf("repository root: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("repository root %s has no go.mod: %v", root, err)
	}
	return root
}

// readFile returns the content of the file at rel, relative to the repository root.
func readFile(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), filepath.FromSlash(rel)))
	if err != nil {
		t.Fatalf("read %s: %v", rel, err)
	}
	return string(b)
}

// mustReplace replaces old with new in s and fails the test when old does not
// occur, so that a mutation that no longer applies is noticed.
func mustReplace(t *testing.T, s, old, new string) string {
	t.Helper()
	if !strings.Contains(s, old) {
		t.Fatalf("mutation: %q not found", old)
	}
	return strings.ReplaceAll(s, old, new)
}

// problemsContain reports whether one of the problems contains want.
func problemsContain(problems []string, want string) bool {
	for _, p := range problems {
		if strings.Contains(p, want) {
			return true
		}
	}
	return false
}

// reportProblems fails the test once per problem.
func reportProblems(t *testing.T, problems []string) {
	t.Helper()
	for _, p := range problems {
		t.Error(p)
	}
}
