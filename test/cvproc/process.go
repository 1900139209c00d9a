package cvproc

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/converge-run/converge/test/testkit"
)

const (
	// StopGrace is how long Stop waits for the process to exit after
	// SIGTERM before it sends SIGKILL.
	StopGrace = 30 * time.Second
	// killWait is how long Kill waits for the process to be gone.
	killWait = 30 * time.Second
	// failureLines is how many of the last lines of standard error Start
	// logs when the test failed.
	failureLines = 40
)

// Options is what Start and Spawn run.
type Options struct {
	// Args is the command line after the binary: "serve", "--config", path.
	Args []string
	// Env is the process's whole environment; Env() when nil.
	Env []string
	// Name names the process in messages; Args joined by spaces when
	// empty.
	Name string
}

// Process is a running (or exited) converge subprocess. Its standard
// output and standard error are kept in memory.
type Process struct {
	name           string
	cmd            *exec.Cmd
	stdout, stderr testkit.Buffer
	done           chan struct{}
	err            error // of Wait, set before done is closed
}

// Env returns this process's environment without anything that configures
// converge or points at a database (DATABASE_URL, TEST_DATABASE_URL and
// CONVERGE_*), followed by extra.
func Env(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k == "DATABASE_URL" || k == "TEST_DATABASE_URL" || strings.HasPrefix(k, "CONVERGE_") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

// Start runs the binary from Build with o and returns without waiting for
// it to be ready (see LogLine, URL and WaitHTTP). At the test's cleanup a
// process still running is stopped (Stop), and when the test has failed
// the process's output is logged.
func Start(t testing.TB, o Options) *Process {
	t.Helper()
	bin := Build(t)
	p, err := spawn(bin, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Stop()
		if t.Failed() {
			t.Logf("converge %s\n--- stdout:\n%s\n--- stderr:\n%s", p.name, p.Stdout(), LastLines(p.Stderr(), failureLines))
		}
	})
	return p
}

// Spawn is Start for a goroutine other than the test's: it returns an
// error instead of failing the test, and registers no cleanup, so the
// caller stops the process.
func Spawn(o Options) (*Process, error) {
	bin, err := build()
	if err != nil {
		return nil, err
	}
	return spawn(bin, o)
}

func spawn(bin string, o Options) (*Process, error) {
	p := &Process{name: o.Name, done: make(chan struct{})}
	if p.name == "" {
		p.name = strings.Join(o.Args, " ")
	}
	p.cmd = exec.Command(bin, o.Args...)
	p.cmd.Env = o.Env
	if p.cmd.Env == nil {
		p.cmd.Env = Env()
	}
	p.cmd.Stdout = &p.stdout
	p.cmd.Stderr = &p.stderr
	p.cmd.SysProcAttr = sysProcAttr()
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start converge %s: %w", p.name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Pid is the process's id (for signals such as SIGSTOP).
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Name is the process's name in messages.
func (p *Process) Name() string { return p.name }

// Stdout is what the process has written to standard output so far.
func (p *Process) Stdout() string { return p.stdout.String() }

// Stderr is what the process has written to standard error (its JSON log)
// so far.
func (p *Process) Stderr() string { return p.stderr.String() }

// Running reports whether the process has not exited.
func (p *Process) Running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Err is how the process ended (an *exec.ExitError unless it exited 0),
// or nil while it runs.
func (p *Process) Err() error {
	if p.Running() {
		return nil
	}
	return p.err
}

// Signal sends sig to the process; the test fails when it cannot.
func (p *Process) Signal(t testing.TB, sig os.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal converge %s: %v", p.name, err)
	}
}

// Stop asks a running process to stop with SIGTERM (so that `converge
// dev` stops its PostgreSQL, say) and kills it when it has not exited
// after StopGrace. It returns once the process is gone.
func (p *Process) Stop() {
	if !p.Running() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(StopGrace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// Kill sends SIGKILL and waits for the process to be gone.
func (p *Process) Kill() error {
	_ = p.cmd.Process.Kill()
	select {
	case <-p.done:
		return nil
	case <-time.After(killWait):
		return fmt.Errorf("converge %s did not die after SIGKILL", p.name)
	}
}

// Wait waits up to timeout for the process to exit and returns its exit
// status (-1 when a signal ended it). The test fails when the process is
// still running after timeout.
func (p *Process) Wait(t testing.TB, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		t.Fatalf("converge %s still running after %s", p.name, timeout)
	}
	var exitErr *exec.ExitError
	switch {
	case p.err == nil:
		return 0
	case errors.As(p.err, &exitErr):
		return exitErr.ExitCode()
	default:
		t.Fatalf("converge %s: %v", p.name, p.err)
		return -1
	}
}

// WaitLog waits up to timeout for a JSON log record on standard error
// whose msg is one of msgs, and returns the first. It fails when the
// process exits before logging one.
func (p *Process) WaitLog(timeout time.Duration, msgs ...string) (map[string]any, error) {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(timeout)
	for {
		if rec := p.logRecord(msgs); rec != nil {
			return rec, nil
		}
		select {
		case <-p.done:
			// Everything written is in the buffer once the process is
			// done.
			if rec := p.logRecord(msgs); rec != nil {
				return rec, nil
			}
			return nil, fmt.Errorf("converge %s exited (%v) before logging %q", p.name, p.err, msgs)
		case <-deadline:
			return nil, fmt.Errorf("converge %s has not logged %q after %s", p.name, msgs, timeout)
		case <-tick.C:
		}
	}
}

// logRecord returns the first record on standard error whose msg is one
// of msgs, or nil.
func (p *Process) logRecord(msgs []string) map[string]any {
	sc := bufio.NewScanner(strings.NewReader(p.Stderr()))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		var rec map[string]any
		if json.Unmarshal(sc.Bytes(), &rec) != nil {
			continue
		}
		if msg, _ := rec["msg"].(string); slices.Contains(msgs, msg) {
			return rec
		}
	}
	return nil
}

// LogLine is WaitLog for one message that fails the test.
func (p *Process) LogLine(t testing.TB, msg string, timeout time.Duration) map[string]any {
	t.Helper()
	rec, err := p.WaitLog(timeout, msg)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// URL waits up to timeout for the process to log that it listens
// ("listening" with its addr) and returns its base URL, http://addr.
func (p *Process) URL(t testing.TB, timeout time.Duration) string {
	t.Helper()
	addr, _ := p.LogLine(t, "listening", timeout)["addr"].(string)
	if addr == "" {
		t.Fatalf("converge %s logged no address", p.name)
	}
	return "http://" + addr
}

// LastLines returns the last n lines of s, after a line saying how many
// came before.
func LastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("(%d lines before)", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}
