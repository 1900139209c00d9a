package testkit_test

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/converge-run/converge/test/testkit"
)

// fatalTB records Fatalf instead of failing the test.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// fatal runs fn with a fatalTB in a goroutine and returns what it failed
// with ("" when it did not).
func fatal(t *testing.T, fn func(testing.TB)) string {
	f := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f)
	}()
	<-done
	return f.msg
}

func TestEventually(t *testing.T) {
	t.Parallel()
	n := 0
	testkit.Eventually(t, 10*time.Second, func() (bool, string) {
		n++
		return n == 3, "not yet"
	})
	if n != 3 {
		t.Errorf("cond called %d times, want 3", n)
	}
	msg := fatal(t, func(tb testing.TB) {
		testkit.Eventually(tb, 50*time.Millisecond, func() (bool, string) { return false, "never" })
	})
	if msg != "after 50ms: never" {
		t.Errorf("timeout message %q", msg)
	}
}

func TestWaitFor(t *testing.T) {
	t.Parallel()
	testkit.WaitFor(t, 10*time.Second, "true", func() bool { return true })
	msg := fatal(t, func(tb testing.TB) {
		testkit.WaitFor(tb, 50*time.Millisecond, "the moon", func() bool { return false })
	})
	if msg != "after 50ms: waiting for the moon" {
		t.Errorf("timeout message %q", msg)
	}
}

func TestBuffer(t *testing.T) {
	t.Parallel()
	var b testkit.Buffer
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 100 {
				_, _ = b.Write([]byte("x"))
				_ = b.String()
			}
		})
	}
	wg.Wait()
	if got := b.String(); got != strings.Repeat("x", 400) {
		t.Errorf("buffer holds %d bytes, want 400", len(got))
	}
}

func TestConfigFile(t *testing.T) {
	t.Parallel()
	path := testkit.ConfigFile(t, "log_level: debug\n")
	b, err := os.ReadFile(path)
	if err != nil || string(b) != "log_level: debug\n" {
		t.Errorf("ConfigFile wrote %q (%v)", b, err)
	}
}
