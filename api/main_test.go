package api_test

import (
	"os"
	"strings"
	"testing"

	"github.com/converge-run/converge/test/pgtest"
)

// TestMain gives the package its database. Fuzzing needs none: a fuzz
// worker process (started by `go test -fuzz`) runs only the fuzz target,
// and neither does `go test -run='^$' -fuzz=...`, so they skip the set-up.
func TestMain(m *testing.M) {
	fuzzOnly, fuzzing := false, false
	for _, arg := range os.Args[1:] {
		switch {
		case strings.HasPrefix(arg, "-test.fuzzworker"):
			os.Exit(m.Run())
		case arg == "-test.run=^$":
			fuzzOnly = true
		case strings.HasPrefix(arg, "-test.fuzz=") && arg != "-test.fuzz=":
			fuzzing = true
		}
	}
	if fuzzOnly && fuzzing {
		os.Exit(m.Run())
	}
	pgtest.Main(m)
}
