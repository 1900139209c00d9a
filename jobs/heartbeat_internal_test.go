package jobs

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/converge-run/converge/test/testkit"
)

// TestHeartbeatFence holds the timer heartbeat's fence to the goroutine's:
// with no renewal in three quarters of the lease the call is cancelled
// with errLeaseUnrenewed and the warning is logged, with the attempt's
// attributes, before stop returns.
func TestHeartbeatFence(t *testing.T) {
	var out testkit.Buffer
	base := slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelInfo}))
	run := benchRun()
	// A renewal is due every 5 s (it would need a store); the lease was
	// taken so long ago that the fence, at 45 s, is due in 100 ms.
	w := &RunWorker{leaseTTL: time.Minute}
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	hb := w.startHeartbeat(ctx, cancel, run, 2, time.Now().Add(-45*time.Second+100*time.Millisecond), &attemptLog{base: base, run: run, attempt: 2})
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the fence did not cancel the call")
	}
	hb.stop()
	if c := context.Cause(ctx); !errors.Is(c, errLeaseUnrenewed) {
		t.Fatalf("cause %v, want errLeaseUnrenewed", c)
	}
	got := out.String()
	for _, want := range []string{"level=WARN", `msg="lease not renewed in time; call stopped"`, "run_id=" + run.ID.String(), "attempt=2", "lease_ttl=1m0s"} {
		if !strings.Contains(got, want) {
			t.Errorf("log %q lacks %q", got, want)
		}
	}
}

// TestHeartbeatStopBeforeDue: once stopped, the heartbeat's fence neither
// cancels nor logs.
func TestHeartbeatStopBeforeDue(t *testing.T) {
	var out testkit.Buffer
	base := slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug}))
	run := benchRun()
	w := &RunWorker{leaseTTL: time.Minute}
	ctx, cancel := context.WithCancelCause(context.Background())
	// The fence is due in 200 ms.
	hb := w.startHeartbeat(ctx, cancel, run, 1, time.Now().Add(-45*time.Second+200*time.Millisecond), &attemptLog{base: base, run: run, attempt: 1})
	cancel(nil)
	hb.stop()
	time.Sleep(400 * time.Millisecond) // past the fence
	if c := context.Cause(ctx); !errors.Is(c, context.Canceled) {
		t.Fatalf("cause %v, want context.Canceled", c)
	}
	if got := out.String(); got != "" {
		t.Fatalf("logged %q after stop", got)
	}
}
