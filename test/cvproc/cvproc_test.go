package cvproc_test

import (
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/converge-run/converge/test/cvproc"
	"github.com/converge-run/converge/test/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestEnv(t *testing.T) {
	t.Setenv("DATABASE_URL", "postgres://x")
	t.Setenv("CONVERGE_LISTEN", ":1")
	env := cvproc.Env("A=1")
	for _, kv := range env {
		if strings.HasPrefix(kv, "DATABASE_URL=") || strings.HasPrefix(kv, "CONVERGE_") {
			t.Errorf("Env keeps %s", kv)
		}
	}
	if env[len(env)-1] != "A=1" {
		t.Errorf("Env ends with %q, want the extra A=1", env[len(env)-1])
	}
	if os.Getenv("PATH") != "" && !strings.Contains(strings.Join(env, "\n"), "PATH=") {
		t.Error("Env drops PATH")
	}
}

func TestLastLines(t *testing.T) {
	t.Parallel()
	if got := cvproc.LastLines("a\nb\nc\n", 2); got != "(1 lines before)\nb\nc" {
		t.Errorf("LastLines = %q", got)
	}
	if got := cvproc.LastLines("a\nb", 5); got != "a\nb" {
		t.Errorf("LastLines = %q", got)
	}
}

func TestProcess(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the binary; skipped with -short")
	}
	t.Run("version", func(t *testing.T) {
		t.Parallel()
		p := cvproc.Start(t, cvproc.Options{Args: []string{"version"}})
		if code := p.Wait(t, time.Minute); code != 0 || strings.TrimSpace(p.Stdout()) != "converge "+cvproc.Version {
			t.Errorf("version: exit %d, output %q", code, p.Stdout())
		}
		if p.Running() || p.Err() != nil || p.Name() != "version" {
			t.Errorf("after exit: running %t, err %v, name %q", p.Running(), p.Err(), p.Name())
		}
	})
	t.Run("exit status and log", func(t *testing.T) {
		t.Parallel()
		p := cvproc.Start(t, cvproc.Options{Args: []string{"serve"}, Name: "no database"})
		if code := p.Wait(t, time.Minute); code != 1 || !strings.Contains(p.Stderr(), "database_url") {
			t.Errorf("serve without a database: exit %d, stderr %q", code, p.Stderr())
		}
		if _, err := p.WaitLog(time.Second, "listening"); err == nil || !strings.Contains(err.Error(), "no database") {
			t.Errorf("WaitLog on an exited process: %v", err)
		}
	})
	t.Run("kill", func(t *testing.T) {
		t.Parallel()
		// Before the schema exists `converge api` is up, not ready.
		p := cvproc.Start(t, cvproc.Options{Args: []string{"api"}, Env: cvproc.Env("CONVERGE_LISTEN=127.0.0.1:0", "DATABASE_URL="+pgtest.EmptyDatabase(t))})
		cvproc.WaitHTTP(t, p.URL(t, 30*time.Second)+"/healthz", 10*time.Second)
		p.Signal(t, syscall.SIGKILL)
		if code := p.Wait(t, 30*time.Second); code != -1 {
			t.Errorf("exit status %d after SIGKILL, want -1", code)
		}
		if err := p.Kill(); err != nil {
			t.Errorf("Kill of an exited process: %v", err)
		}
	})
}
