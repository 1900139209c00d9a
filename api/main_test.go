package api_test

import (
	"os"
	"strings"
	"testing"

	"github.com/converge-run/converge/test/pgtest"
)

// TestMain gives the package its database. A fuzz worker process (started
// by `go test -fuzz`) runs only fuzz targets, which need none, so it skips
// the set-up.
func TestMain(m *testing.M) {
	for _, arg := range os.Args[1:] {
		if strings.HasPrefix(arg, "-test.fuzzworker") {
			os.Exit(m.Run())
		}
	}
	pgtest.Main(m)
}
