package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/converge-run/converge/test/testkit"
)

// buildBinary builds cmd/converge into a folder of t's, removed when t and
// its subtests are done.
func buildBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "converge")
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	goCmd := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goCmd); err != nil {
		goCmd = "go"
	}
	cmd := exec.Command(goCmd, "build", "-o", bin, "-ldflags", "-X main.version=e2e-test", "./cmd/converge")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/converge: %v\n%s", err, out)
	}
	return bin
}

// baseEnv is this process's environment without anything that configures
// converge or points at a database.
func baseEnv(extra ...string) []string {
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

// output is a process's standard output or error, safe to read while the
// process writes it.
type output struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.Write(p)
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

// proc is a converge subprocess.
type proc struct {
	name           string
	cmd            *exec.Cmd
	stdout, stderr output
	done           chan struct{}
	err            error // of Wait, once done is closed
}

// start runs bin with args and env. At cleanup a process still running is
// stopped, and a failed test shows what the process wrote.
func start(t *testing.T, bin string, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{name: strings.Join(args, " "), done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = env
	p.cmd.Stdout = &p.stdout
	p.cmd.Stderr = &p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start converge %s: %v", p.name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		// A process still running is asked to stop (so that `converge
		// dev` stops its PostgreSQL), then killed.
		if p.running() {
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-p.done:
			case <-time.After(30 * time.Second):
				_ = p.cmd.Process.Kill()
				<-p.done
			}
		}
		if t.Failed() {
			t.Logf("converge %s\n--- stdout:\n%s\n--- stderr:\n%s", p.name, p.stdout.String(), lastLines(p.stderr.String(), 40))
		}
	})
	return p
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("(%d lines before)", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

// run runs bin to its end and returns its exit status and output.
func run(t *testing.T, bin string, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	p := start(t, bin, env, args...)
	return p.wait(t, time.Minute), p.stdout.String(), p.stderr.String()
}

// wait waits for the process to exit and returns its exit status.
func (p *proc) wait(t *testing.T, timeout time.Duration) int {
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

// running reports whether the process has not exited.
func (p *proc) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// signal sends sig to the process.
func (p *proc) signal(t *testing.T, sig os.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal converge %s: %v", p.name, err)
	}
}

// logLine waits for a JSON log line on stderr with msg and returns it.
func (p *proc) logLine(t *testing.T, msg string, timeout time.Duration) map[string]any {
	t.Helper()
	var found map[string]any
	testkit.Eventually(t, timeout, func() (bool, string) {
		sc := bufio.NewScanner(strings.NewReader(p.stderr.String()))
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil && m["msg"] == msg {
				found = m
				return true, ""
			}
		}
		if !p.running() {
			t.Fatalf("converge %s exited (%v) before logging %q", p.name, p.err, msg)
		}
		return false, fmt.Sprintf("converge %s has not logged %q", p.name, msg)
	})
	return found
}

// baseURL waits for the process to listen and returns its base URL.
func (p *proc) baseURL(t *testing.T) string {
	t.Helper()
	addr, _ := p.logLine(t, "listening", 30*time.Second)["addr"].(string)
	if addr == "" {
		t.Fatalf("converge %s logged no address", p.name)
	}
	return "http://" + addr
}

// writeConfig writes a configuration file and returns its path.
func writeConfig(t *testing.T, yaml string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "converge.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatalf("write config: %v", err)
	}
	return path
}

// client talks to a converge API with a token.
type client struct {
	base, token string
}

// do sends a request with a JSON body (when not nil) and decodes a JSON
// answer into a map.
func (c client) do(t *testing.T, method, path string, body any) (int, map[string]any) {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatalf("encode: %v", err)
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, c.base+path, r)
	if err != nil {
		t.Fatalf("request: %v", err)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return resp.StatusCode, m
}

// submit posts an event and returns its id.
func (c client) submit(t *testing.T, kind, resource string, version int64, payload map[string]any) string {
	t.Helper()
	status, body := c.do(t, http.MethodPost, "/v1/events", map[string]any{
		"kind": kind, "resource": resource, "version": version, "payload": payload,
	})
	if status != http.StatusAccepted {
		t.Fatalf("submit %s %s@%d: %d %v", kind, resource, version, status, body)
	}
	return body["event"].(map[string]any)["id"].(string)
}

// waitEvent polls an event until its status is terminal and returns it.
func (c client) waitEvent(t *testing.T, id string, timeout time.Duration) map[string]any {
	t.Helper()
	var ev map[string]any
	testkit.Eventually(t, timeout, func() (bool, string) {
		status, body := c.do(t, http.MethodGet, "/v1/events/"+id, nil)
		if status != http.StatusOK {
			t.Fatalf("get event %s: %d %v", id, status, body)
		}
		ev = body
		switch body["status"] {
		case "succeeded", "failed", "superseded", "cancelled":
			return true, ""
		}
		return false, fmt.Sprintf("event %s is %v", id, body["status"])
	})
	return ev
}

// healthy polls GET /healthz until it answers 200.
func healthy(t *testing.T, base string, timeout time.Duration) {
	t.Helper()
	testkit.Eventually(t, timeout, func() (bool, string) {
		resp, err := http.Get(base + "/healthz")
		if err != nil {
			return false, err.Error()
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, fmt.Sprintf("/healthz answers %d", resp.StatusCode)
	})
}
