package apicheck_test

import (
	"testing"

	"github.com/converge-run/converge/test/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }
