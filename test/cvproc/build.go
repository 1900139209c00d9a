package cvproc

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// Version is the version the binary from Build reports (`converge
// version` prints "converge " + Version).
const Version = "cvproc-test"

// binDirPrefix starts the name of the folder each test process builds
// into: converge-cvproc-<pid>-<random>.
const binDirPrefix = "converge-cvproc-"

// Build returns the path of the converge binary, built from this module's
// cmd/converge (with the go command on PATH) the first time a
// test process asks; the test fails when the build does. The folder is
// named for the test process, and removed by a later test process once
// this one is gone.
func Build(t testing.TB) string {
	t.Helper()
	bin, err := build()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// build builds the binary once per test process.
var build = sync.OnceValues(func() (string, error) {
	sweep()
	dir, err := os.MkdirTemp("", fmt.Sprintf("%s%d-", binDirPrefix, os.Getpid()))
	if err != nil {
		return "", fmt.Errorf("cvproc: %w", err)
	}
	bin := filepath.Join(dir, "converge")
	_, file, _, _ := runtime.Caller(0)
	cmd := exec.Command("go", "build", "-o", bin, "-ldflags", "-X main.version="+Version, "./cmd/converge")
	cmd.Dir = filepath.Join(filepath.Dir(file), "..", "..")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("cvproc: go build ./cmd/converge: %w\n%s", err, out)
	}
	return bin, nil
})

// sweep removes the folders of test processes that have exited.
func sweep() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), binDirPrefix+"*"))
	for _, d := range dirs {
		pidPart, _, _ := strings.Cut(strings.TrimPrefix(filepath.Base(d), binDirPrefix), "-")
		pid, err := strconv.Atoi(pidPart)
		if err != nil || pid == os.Getpid() {
			continue
		}
		if syscall.Kill(pid, 0) == nil {
			continue // still running (or the pid was reused: leave it)
		}
		_ = os.RemoveAll(d)
	}
}
