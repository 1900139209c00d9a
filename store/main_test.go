package store_test

import (
	"testing"

	"github.com/converge-run/converge/test/pgtest"
)

// TestMain gives the package its database.
func TestMain(m *testing.M) { pgtest.Main(m) }
