package target

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/test/testkit"
)

// writeScript writes an executable /bin/sh script with body into a new
// temporary directory and returns its path.
func writeScript(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "script.sh")
	// Hold ForkLock while the file is open for writing, so that no command
	// started meanwhile by a parallel test inherits the descriptor and makes
	// running the script fail with ETXTBSY.
	syscall.ForkLock.Lock()
	err := os.WriteFile(path, []byte("#!/bin/sh\n"+body+"\n"), 0o755)
	syscall.ForkLock.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// newExec returns an exec target for cfg, failing the test on error.
func newExec(t *testing.T, cfg ExecConfig) *Exec {
	t.Helper()
	e, err := NewExec(cfg)
	if err != nil {
		t.Fatalf("NewExec: %v", err)
	}
	return e
}

// procGone reports whether process pid is gone (or a zombie, which holds no
// resources and waits for its reaper).
func procGone(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	// The state follows the parenthesised command name.
	s := string(stat)
	return strings.HasPrefix(s[strings.LastIndexByte(s, ')')+1:], " Z")
}

// waitGone fails the test unless process pid is gone within d.
func waitGone(t *testing.T, pid int, d time.Duration) {
	t.Helper()
	testkit.WaitFor(t, d, fmt.Sprintf("child %d to be gone", pid), func() bool { return procGone(pid) })
}

// pidTimeout is how long a script gets to write its child's pid.
const pidTimeout = 5 * time.Second

// pidFile returns the pid in the file at path, if there is one yet.
func pidFile(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// awaitPID waits up to pidTimeout for a pid in the file at path and reports
// whether one came. It does not fail the test, so a goroutine may call it.
func awaitPID(path string) bool {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(pidTimeout)
	for {
		if _, err := pidFile(path); err == nil {
			return true
		}
		select {
		case <-deadline:
			return false
		case <-tick.C:
		}
	}
}

// readPID reads the pid a script wrote to path, waiting up to pidTimeout for it
// to appear.
func readPID(t *testing.T, path string) int {
	t.Helper()
	var pid int
	testkit.Eventually(t, pidTimeout, func() (bool, string) {
		var err error
		pid, err = pidFile(path)
		return err == nil, fmt.Sprintf("no pid in %s: %v", path, err)
	})
	return pid
}

func TestExecSuccess(t *testing.T) {
	t.Parallel()
	jsonString := func(n int) string { return `"` + strings.Repeat("a", n-2) + `"` }
	tests := []struct {
		name   string
		script string
		want   string // "" for a nil Output
	}{
		{name: "json", script: `cat >/dev/null; printf '{"deployed":true}'`, want: `{"deployed":true}`},
		{name: "json with newline", script: `echo '[1,2]'`, want: "[1,2]\n"},
		{name: "no output", script: `exit 0`},
		{name: "not json", script: `echo deployed`},
		{name: "exactly 64 KiB", script: `printf '"'; head -c 65534 /dev/zero | tr '\0' a; printf '"'`, want: jsonString(MaxOutputBytes)},
		{name: "64 KiB plus one", script: `printf '"'; head -c 65535 /dev/zero | tr '\0' a; printf '"'`},
		{name: "1 MiB", script: `head -c 1048576 /dev/zero | tr '\0' a`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// A relative command is relative to Dir.
			script := writeScript(t, tt.script)
			e := newExec(t, ExecConfig{Command: []string{"./" + filepath.Base(script)}, Dir: filepath.Dir(script)})
			res, err := e.Call(t.Context(), testRequest())
			if err != nil {
				t.Fatalf("Call: %v", err)
			}
			if tt.want == "" && res.Output != nil {
				t.Errorf("Output has %d bytes, want nil", len(res.Output))
			}
			if tt.want != "" && string(res.Output) != tt.want {
				t.Errorf("Output = %.60q (%d bytes), want %.60q (%d bytes)", res.Output, len(res.Output), tt.want, len(tt.want))
			}
		})
	}
}

func TestExecEnvStdinDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	script := writeScript(t, `cat > stdin.json; env > env.txt; pwd > pwd.txt; echo "$1" > arg.txt`)
	req := testRequest()
	e := newExec(t, ExecConfig{
		Command: []string{script, "two words"},
		Env:     []string{"EXTRA=x=y", "CONVERGE_KIND=forged"},
		Dir:     dir,
	})
	if _, err := e.Call(t.Context(), req); err != nil {
		t.Fatalf("Call: %v", err)
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}

	checkBody(t, []byte(read("stdin.json")), req)

	env := readEnvDump(t, filepath.Join(dir, "env.txt"))
	for k, want := range map[string]string{
		"CONVERGE_EVENT_ID": req.EventID.String(),
		"CONVERGE_RUN_ID":   req.RunID.String(),
		"CONVERGE_ATTEMPT":  "3",
		"CONVERGE_KIND":     "build",
		"CONVERGE_RESOURCE": "app/web",
		"CONVERGE_VERSION":  "42",
		"EXTRA":             "x=y",
		"PATH":              os.Getenv("PATH"),
	} {
		if env[k] != want {
			t.Errorf("env %s = %q, want %q", k, env[k], want)
		}
	}

	wantDir, _ := filepath.EvalSymlinks(dir)
	if got, _ := filepath.EvalSymlinks(strings.TrimSpace(read("pwd.txt"))); got != wantDir {
		t.Errorf("working directory %q, want %q", got, wantDir)
	}
	if got := strings.TrimSpace(read("arg.txt")); got != "two words" {
		t.Errorf("argument %q, want %q", got, "two words")
	}
}

func TestExecExitCodes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		script string
		code   int
		want   converge.ErrorClass
	}{
		{name: "listed permanent", script: `echo bad input >&2; exit 3`, code: 3, want: converge.ClassPermanent},
		{name: "other listed permanent", script: `exit 64`, code: 64, want: converge.ClassPermanent},
		{name: "unlisted", script: `echo try again >&2; exit 4`, code: 4, want: converge.ClassTransient},
		{name: "1", script: `exit 1`, code: 1, want: converge.ClassTransient},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newExec(t, ExecConfig{Command: []string{writeScript(t, tt.script)}, PermanentExitCodes: []int{3, 64}})
			_, err := e.Call(t.Context(), testRequest())
			ae := attemptErr(t, err)
			if ae.Err.Class != tt.want {
				t.Errorf("class = %s, want %s", ae.Err.Class, tt.want)
			}
			if ae.Err.ExitCode == nil || *ae.Err.ExitCode != tt.code {
				t.Errorf("ExitCode = %v, want %d", ae.Err.ExitCode, tt.code)
			}
			if !strings.Contains(ae.Err.Message, "exit status "+strconv.Itoa(tt.code)) {
				t.Errorf("message %q lacks the exit status", ae.Err.Message)
			}
			var ee *ExitError
			if !errors.As(err, &ee) || ee.Code != tt.code {
				t.Errorf("cause is not an *ExitError with code %d: %v", tt.code, err)
			}
		})
	}
}

func TestExecStderrTail(t *testing.T) {
	t.Parallel()
	// 10 KiB of stderr in many writes: 6 KiB of A, then 4 KiB of B.
	script := writeScript(t, `
i=0
while [ $i -lt 6 ]; do head -c 1024 /dev/zero | tr '\0' A >&2; i=$((i+1)); done
head -c 4096 /dev/zero | tr '\0' B >&2
exit 1`)
	_, err := newExec(t, ExecConfig{Command: []string{script}}).Call(t.Context(), testRequest())
	ae := attemptErr(t, err)
	msg := ae.Err.Message
	if !strings.HasSuffix(msg, ": "+strings.Repeat("B", 4096)) || strings.Contains(msg, "A") {
		t.Errorf("message does not end with the last 4 KiB of stderr: %d bytes, %d A", len(msg), strings.Count(msg, "A"))
	}
}

func TestExecStartFailure(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	notExecutable := filepath.Join(dir, "plain.sh")
	if err := os.WriteFile(notExecutable, []byte("#!/bin/sh\nexit 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		cfg  ExecConfig
	}{
		{"missing path", ExecConfig{Command: []string{filepath.Join(dir, "missing.sh")}}},
		{"missing in PATH", ExecConfig{Command: []string{"converge-no-such-command"}}},
		{"not executable", ExecConfig{Command: []string{notExecutable}}},
		{"missing dir", ExecConfig{Command: []string{"/bin/sh", "-c", "exit 0"}, Dir: filepath.Join(dir, "nope")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := newExec(t, tt.cfg).Call(t.Context(), testRequest())
			ae := attemptErr(t, err)
			if ae.Err.Class != converge.ClassPermanent || ae.Err.ExitCode != nil {
				t.Errorf("got %s, exit code %v: %v", ae.Err.Class, ae.Err.ExitCode, err)
			}
		})
	}
}

func TestExecTimeoutIgnoringTERM(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	script := writeScript(t, `trap '' TERM; sleep 60 & echo $! > child.pid; echo started >&2; wait`)
	e := newExec(t, ExecConfig{Command: []string{script}, Dir: dir, Timeout: 200 * time.Millisecond})
	start := time.Now()
	_, err := e.Call(t.Context(), testRequest())
	elapsed := time.Since(start)
	ae := attemptErr(t, err)
	if ae.Err.Class != converge.ClassTransient || !errors.Is(err, ErrTimeout) {
		t.Errorf("got %s: %v", ae.Err.Class, err)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a target timeout must not look like the caller's context ending: %v", err)
	}
	if !strings.Contains(ae.Err.Message, "started") {
		t.Errorf("message %q lacks the stderr tail", ae.Err.Message)
	}
	if elapsed > 200*time.Millisecond+KillGrace+slack {
		t.Errorf("call took %s", elapsed)
	}
	waitGone(t, readPID(t, filepath.Join(dir, "child.pid")), slack)
}

func TestExecTimeoutKillsChildren(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	script := writeScript(t, `sleep 60 & echo $! > child.pid; sleep 60`)
	e := newExec(t, ExecConfig{Command: []string{script}, Dir: dir, Timeout: 200 * time.Millisecond})
	start := time.Now()
	_, err := e.Call(t.Context(), testRequest())
	if elapsed := time.Since(start); elapsed > slack {
		t.Errorf("call took %s; the script dies on SIGTERM", elapsed)
	}
	if !errors.Is(err, ErrTimeout) {
		t.Errorf("error %v does not wrap ErrTimeout", err)
	}
	waitGone(t, readPID(t, filepath.Join(dir, "child.pid")), slack)
}

func TestExecSuccessKillsLeftovers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		script  string
		timeout time.Duration
		within  time.Duration
	}{
		// A leftover with its own output returns at once.
		{name: "detached output", script: `sleep 60 >/dev/null 2>&1 & echo $! > child.pid; echo '{"ok":1}'`, within: slack},
		// One holding standard output open is waited for at most WaitDelay.
		{name: "holding stdout", script: `sleep 60 & echo $! > child.pid; echo '{"ok":1}'`, within: KillGrace + time.Second + slack},
		// Past the call's timeout too: the command exited 0 before it,
		// so the call succeeded (SPEC §5: exit 0 is success); only its
		// leftover was still holding the pipe when the timeout came.
		{name: "holding stdout past the timeout", script: `sleep 60 & echo $! > child.pid; echo '{"ok":1}'`,
			timeout: 500 * time.Millisecond, within: KillGrace + time.Second + slack},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			e := newExec(t, ExecConfig{Command: []string{writeScript(t, tt.script)}, Dir: dir, Timeout: tt.timeout})
			start := time.Now()
			res, err := e.Call(t.Context(), testRequest())
			if elapsed := time.Since(start); elapsed > tt.within {
				t.Errorf("call took %s", elapsed)
			}
			if err != nil || string(res.Output) != "{\"ok\":1}\n" {
				t.Errorf("Call = %q, %v", res.Output, err)
			}
			waitGone(t, readPID(t, filepath.Join(dir, "child.pid")), slack)
		})
	}
}

func TestExecCancel(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	script := writeScript(t, `sleep 60 & echo $! > child.pid; wait`)
	e := newExec(t, ExecConfig{Command: []string{script}, Dir: dir, Timeout: time.Minute})
	ctx := callCancelled(t, e, func() {
		awaitPID(filepath.Join(dir, "child.pid")) // started, or never will
	})
	waitGone(t, readPID(t, filepath.Join(dir, "child.pid")), slack)

	// A context already done starts nothing.
	if _, err := e.Call(ctx, testRequest()); !errors.Is(err, context.Canceled) {
		t.Errorf("call with a done context: %v", err)
	}
}

func TestExecLargeStdinUnread(t *testing.T) {
	t.Parallel()
	// A payload larger than a pipe buffer, sent to a command that never
	// reads it, must not block the call.
	req := testRequest()
	big, _ := json.Marshal(strings.Repeat("x", 1<<20))
	req.Payload = big
	e := newExec(t, ExecConfig{Command: []string{writeScript(t, `echo '"done"'`)}})
	res, err := e.Call(t.Context(), req)
	if err != nil || string(res.Output) != "\"done\"\n" {
		t.Errorf("Call = %q, %v", res.Output, err)
	}
}

func TestNewExecInvalid(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  ExecConfig
		want string
	}{
		{"no command", ExecConfig{}, "command"},
		{"empty command", ExecConfig{Command: []string{""}}, "command"},
		{"negative timeout", ExecConfig{Command: []string{"true"}, Timeout: -1}, "timeout"},
		{"exit code 0", ExecConfig{Command: []string{"true"}, PermanentExitCodes: []int{0}}, "permanent_exit_codes"},
		{"exit code 256", ExecConfig{Command: []string{"true"}, PermanentExitCodes: []int{256}}, "permanent_exit_codes"},
		{"bad env", ExecConfig{Command: []string{"true"}, Env: []string{"TOKEN"}}, "env"},
	}
	for _, tt := range tests {
		if _, err := NewExec(tt.cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want one naming %q", tt.name, err, tt.want)
		}
	}
}
