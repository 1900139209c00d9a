package testkit

import (
	"os"
	"path/filepath"
	"testing"
)

// ConfigFile writes yaml to converge.yaml in a folder of the test's
// (removed at cleanup) and returns its path.
func ConfigFile(t testing.TB, yaml string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "converge.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatalf("write config: %v", err)
	}
	return path
}
