package outage

import (
	"syscall"
	"testing"
	"time"

	"github.com/converge-run/converge/test/cvproc"
	"github.com/converge-run/converge/test/testkit"
)

// TestStopWhileWaiting: a worker and a serve waiting for a database that
// never comes still stop cleanly (exit 0) and at once on SIGTERM.
func TestStopWhileWaiting(t *testing.T) {
	t.Parallel()
	tg := newTarget(t)
	cfg := testkit.ConfigFile(t, config("postgres://converge@127.0.0.1:1/converge?sslmode=disable&connect_timeout=2", tg, ""))
	for _, cmd := range []string{"worker", "serve"} {
		p, base := proc(t, cmd, "--config", cfg)
		if _, err := p.WaitLog(20*time.Second, "workers cannot start yet; retrying"); err != nil {
			t.Fatal(err)
		}
		wantNotReady(t, base, "database unreachable")
		p.Signal(t, syscall.SIGTERM)
		began := time.Now()
		if code := p.Wait(t, 15*time.Second); code != 0 || time.Since(began) > 10*time.Second {
			t.Errorf("%s waiting for the database: exit %d %s after SIGTERM, want 0 at once\n%s", cmd, code, time.Since(began), cvproc.LastLines(p.Stderr(), 10))
		}
	}
}
