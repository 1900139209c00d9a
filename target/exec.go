package target

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/converge-run/converge"
)

// tracerName is the instrumentation scope of the exec target's spans.
const tracerName = "github.com/converge-run/converge/target"

// DefaultExecTimeout is the timeout of a command when ExecConfig.Timeout is
// zero.
const DefaultExecTimeout = 10 * time.Minute

// KillGrace is how long a command's process group has between SIGTERM and
// SIGKILL when its call times out or is cancelled.
const KillGrace = 2 * time.Second

// maxStderrBytes is how much of the end of a command's standard error is
// kept in the error of a failed call.
const maxStderrBytes = 4 << 10

// ExecConfig configures an exec target.
type ExecConfig struct {
	// Command is the argv of the command; no shell is involved. A name
	// without a slash is looked up in PATH; a relative path is relative to
	// Dir.
	Command []string
	// Timeout bounds one call. Zero means DefaultExecTimeout. On timeout the
	// process group gets SIGTERM, then SIGKILL KillGrace later, so a call may
	// last up to KillGrace longer than Timeout.
	Timeout time.Duration
	// PermanentExitCodes are the exit codes of a permanent failure. Every
	// other non-zero exit is a transient failure.
	PermanentExitCodes []int
	// Env holds extra KEY=value environment variables, added to the
	// environment the command inherits from the worker. That environment
	// is the worker's without converge's own variables, which hold its
	// credentials: every CONVERGE_* variable, DATABASE_URL,
	// DATABASE_DIRECT_URL, the libpq PG* variables (PGPASSWORD, PGHOST...)
	// and those HiddenEnv names. An entry of Env is added even when its
	// name is one of those: an operator may pass such a value deliberately.
	// The per-call CONVERGE_* variables of Call are added after Env.
	Env []string
	// HiddenEnv names more variables removed from the environment the
	// command inherits: those converge reads secrets from (every
	// secret_env and signing_secret_env of the configuration,
	// config.Config.SecretEnvNames).
	HiddenEnv []string
	// Dir is the working directory of the command; empty means the worker's.
	Dir string
}

// Exec is a target that runs a command for each attempt.
type Exec struct {
	command   []string
	timeout   time.Duration
	permanent []int
	env       []string
	hidden    []string
	dir       string
}

// NewExec returns an exec target, or an error naming the invalid setting.
func NewExec(cfg ExecConfig) (*Exec, error) {
	if len(cfg.Command) == 0 || cfg.Command[0] == "" {
		return nil, errors.New("exec target: command must not be empty")
	}
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("exec target: timeout must not be negative, got %s", cfg.Timeout)
	}
	for _, c := range cfg.PermanentExitCodes {
		if c < 1 || c > 255 {
			return nil, fmt.Errorf("exec target: permanent_exit_codes: %d is not a failure exit code (1-255)", c)
		}
	}
	for _, kv := range cfg.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			// The entry is deliberately left out: it may hold a secret.
			return nil, errors.New("exec target: env entries must be KEY=value")
		}
	}
	t := &Exec{
		command:   slices.Clone(cfg.Command),
		timeout:   cfg.Timeout,
		permanent: slices.Clone(cfg.PermanentExitCodes),
		env:       slices.Clone(cfg.Env),
		hidden:    slices.Clone(cfg.HiddenEnv),
		dir:       cfg.Dir,
	}
	if t.timeout == 0 {
		t.timeout = DefaultExecTimeout
	}
	return t, nil
}

// Call runs the command in a process group of its own, with the request as
// JSON on its standard input and in CONVERGE_EVENT_ID, CONVERGE_RUN_ID,
// CONVERGE_ATTEMPT, CONVERGE_KIND, CONVERGE_RESOURCE and CONVERGE_VERSION,
// which win over the configured Env. The command inherits the worker's
// environment without converge's own variables and secrets (see
// ExecConfig.Env), plus Env.
//
// Exit 0 is a success; standard output that is JSON of at most
// MaxOutputBytes becomes the output. An exit code listed as permanent is a
// permanent failure; any other exit, death by a signal, and the timeout are
// transient failures. The error holds the exit code and the last 4 KiB of
// standard error.
//
// A command that cannot be started because its executable or directory is
// missing, not executable or not a valid executable is a permanent failure:
// retrying will not help until someone fixes the deployment, and the dead
// letter can then be redriven. Other start failures (out of processes, file
// descriptors or memory) are transient.
//
// When the call ends, whatever way, anything left in the process group is
// killed, so a command cannot leak background processes. On timeout or
// cancellation of ctx the group gets SIGTERM and, KillGrace later, SIGKILL.
func (t *Exec) Call(ctx context.Context, req Request) (Result, error) {
	what := "exec " + t.command[0]
	if ctx.Err() != nil {
		return Result{}, canceledError(ctx, what)
	}
	in, err := req.encode()
	if err != nil {
		return Result{}, converge.Permanent(err)
	}
	in = append(in, '\n')

	callCtx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()

	var (
		stdout cappedBuffer
		stderr tailBuffer
		mu     sync.Mutex
		kill   *time.Timer
	)
	cmd := exec.CommandContext(callCtx, t.command[0], t.command[1:]...)
	cmd.Dir = t.dir
	cmd.Stdin = bytes.NewReader(in)
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	// Room for Env, the six CONVERGE_* variables, TRACEPARENT and TRACESTATE.
	cmd.Env = append(commandEnv(os.Environ(), t.hidden, len(t.env)+8), t.env...)
	cmd.Env = append(cmd.Env,
		"CONVERGE_EVENT_ID="+req.EventID.String(),
		"CONVERGE_RUN_ID="+req.RunID.String(),
		"CONVERGE_ATTEMPT="+strconv.Itoa(req.Attempt),
		"CONVERGE_KIND="+req.Kind,
		"CONVERGE_RESOURCE="+req.Resource,
		"CONVERGE_VERSION="+strconv.FormatInt(req.Version, 10),
	)
	// With tracing on, the command runs in a client span of its own, child
	// of the attempt's, and gets its W3C trace context in TRACEPARENT (and
	// TRACESTATE), so that what it does joins the trace (and, for an
	// attempt not sampled, knows it is not).
	if parent := trace.SpanFromContext(ctx); parent.SpanContext().IsValid() {
		var span trace.Span
		ctx, span = parent.TracerProvider().Tracer(tracerName).Start(ctx, "converge.exec",
			trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attribute.String("process.executable.name", t.command[0])))
		defer span.End()
		carrier := propagation.MapCarrier{}
		propagation.TraceContext{}.Inject(ctx, carrier)
		cmd.Env = append(cmd.Env, "TRACEPARENT="+carrier.Get("traceparent"))
		if ts := carrier.Get("tracestate"); ts != "" {
			cmd.Env = append(cmd.Env, "TRACESTATE="+ts)
		}
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		pgid := cmd.Process.Pid
		err := syscall.Kill(-pgid, syscall.SIGTERM)
		mu.Lock()
		kill = time.AfterFunc(KillGrace, func() { _ = syscall.Kill(-pgid, syscall.SIGKILL) })
		mu.Unlock()
		if errors.Is(err, syscall.ESRCH) {
			return os.ErrProcessDone
		}
		return err
	}
	// After the group's SIGKILL, give the pipes a moment; past that, a
	// process that left the group still holding them open is not waited for.
	cmd.WaitDelay = KillGrace + time.Second

	if err := cmd.Start(); err != nil {
		if ctx.Err() != nil {
			return Result{}, canceledError(ctx, what)
		}
		return Result{}, startError(what, err)
	}
	waitErr := cmd.Wait()
	mu.Lock()
	// Cancel ran (kill is set) only if the call's context ended while the
	// leader was still running: os/exec stops watching the context once
	// the process has exited, even while it still waits (WaitDelay) for a
	// leftover holding the pipes.
	interrupted := kill != nil
	if kill != nil {
		kill.Stop()
	}
	mu.Unlock()
	// The leader is gone; kill whatever it left behind in its group.
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)

	switch {
	case ctx.Err() != nil:
		return Result{}, canceledError(ctx, what)
	case callCtx.Err() != nil && interrupted:
		// (A leader that exited before the timeout, whose leftover held
		// its standard output past it, is judged by its exit below.)
		ae := timeoutError(what, t.timeout)
		ae.Err.Message = withStderr(ae.Err.Message, stderr.String())
		return Result{}, ae
	}

	state := cmd.ProcessState
	if state == nil {
		return Result{}, converge.Transient(fmt.Errorf("%s: %w", what, waitErr))
	}
	if state.Success() {
		// A nil or ErrWaitDelay waitErr: exit 0, whatever a straggler did to
		// the pipes afterwards.
		if stdout.overflow {
			return Result{}, nil
		}
		return Result{Output: output(stdout.buf)}, nil
	}

	ws, _ := state.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		cause := fmt.Errorf("%s: killed by signal %s", what, ws.Signal())
		return Result{}, attemptError(converge.ClassTransient, withStderr(cause.Error(), stderr.String()), cause)
	}
	code := state.ExitCode()
	class := converge.ClassTransient
	if slices.Contains(t.permanent, code) {
		class = converge.ClassPermanent
	}
	cause := &ExitError{Code: code}
	ae := attemptError(class, withStderr(fmt.Sprintf("%s: exit status %d", what, code), stderr.String()), cause)
	ae.Err.ExitCode = &code
	return Result{}, ae
}

// startError classifies the failure to start a command.
func startError(what string, err error) *converge.AttemptError {
	err = fmt.Errorf("%s: start: %w", what, err)
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) ||
		errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.ENOEXEC) ||
		errors.Is(err, syscall.ENOTDIR) || errors.Is(err, syscall.EISDIR) {
		return converge.Permanent(err)
	}
	return converge.Transient(err)
}

// ExitError is the cause of the error of a command that exited with a
// non-zero code.
type ExitError struct {
	Code int
}

// Error implements error.
func (e *ExitError) Error() string { return "exit status " + strconv.Itoa(e.Code) }

// withStderr appends the tail of standard error to msg.
func withStderr(msg, tail string) string {
	if tail = strings.TrimSpace(tail); tail != "" {
		return msg + ": " + tail
	}
	return msg
}

// cappedBuffer keeps up to MaxOutputBytes of what is written to it and
// discards the rest, noting that there was more. It never fails a write, so
// the command is never blocked on a full pipe.
type cappedBuffer struct {
	buf      []byte
	overflow bool
}

// Write implements io.Writer.
func (b *cappedBuffer) Write(p []byte) (int, error) {
	room := MaxOutputBytes - len(b.buf)
	if len(p) > room {
		b.overflow = true
		b.buf = append(b.buf, p[:max(room, 0)]...)
		return len(p), nil
	}
	b.buf = append(b.buf, p...)
	return len(p), nil
}

// tailBuffer keeps the last maxStderrBytes written to it.
type tailBuffer struct {
	buf []byte
}

// Write implements io.Writer.
func (b *tailBuffer) Write(p []byte) (int, error) {
	n := len(p)
	if len(p) >= maxStderrBytes {
		b.buf = append(b.buf[:0], p[len(p)-maxStderrBytes:]...)
		return n, nil
	}
	if over := len(b.buf) + len(p) - maxStderrBytes; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	b.buf = append(b.buf, p...)
	return n, nil
}

// String returns the kept bytes as valid UTF-8, without a rune the start of
// the window may have split.
func (b *tailBuffer) String() string {
	s := b.buf
	for k := 0; k < utf8.UTFMax-1 && len(s) > 0 && !utf8.RuneStart(s[0]); k++ {
		s = s[1:]
	}
	return strings.ToValidUTF8(string(s), "\uFFFD")
}
