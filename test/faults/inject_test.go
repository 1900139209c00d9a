package faults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// faultCounts counts the faults injected, by kind.
type faultCounts struct {
	mu sync.Mutex
	n  map[string]int
}

func (f *faultCounts) add(kind string, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n == nil {
		f.n = map[string]int{}
	}
	f.n[kind] += n
}

func (f *faultCounts) snapshot() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]int, len(f.n))
	for k, v := range f.n {
		out[k] = v
	}
	return out
}

// Fault kinds, as the table names them.
const (
	fWorkerKill = "worker SIGKILL"
	fAPIKill    = "api SIGKILL"
	fPGRestart  = "pg_ctl restart -m immediate"
	fTerminate  = "backend terminated"
	fSIGSTOP    = "worker SIGSTOP past rescue_after"
	fLock       = "table lock"
	fMaxConn    = "max_connections lowered"
	fReadOnly   = "primary read-only"
)

// injector injects faults until ctx ends, and undoes any it left in place
// (a stopped worker is continued, a lock released, the database writable
// again) before it returns.
type injector struct {
	st     *stack
	pg     *pgCluster
	faults *faultCounts
	size   suiteSize
	// pgMu serializes the injections that restart or reconfigure
	// PostgreSQL.
	pgMu *sync.Mutex
	// life serializes kills and starts per process name (the keeper's
	// restarts too).
	life *lifecycle
	logf func(format string, args ...any)
}

// lifecycle holds a lock per process name.
type lifecycle struct {
	mu sync.Mutex
	m  map[string]*sync.Mutex
}

func (l *lifecycle) of(name string) *sync.Mutex {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[string]*sync.Mutex{}
	}
	if l.m[name] == nil {
		l.m[name] = &sync.Mutex{}
	}
	return l.m[name]
}

// sleep waits d or until ctx ends, and reports whether ctx is still live.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func between(lo, hi time.Duration) time.Duration { return lo + rand.N(hi-lo+1) }

// restart kills process name (of mode) and starts it again; a start that
// fails (the process exited) is left to the keeper.
func (in *injector) restart(mode, name, fault string) {
	mu := in.life.of(name)
	mu.Lock()
	defer mu.Unlock()
	if err := in.st.kill(name); err != nil {
		in.logf("kill %s: %v", name, err)
		return
	}
	in.faults.add(fault, 1)
	if err := in.st.start(mode, name); err != nil {
		in.logf("start %s after its kill: %v", name, firstLine(err))
	}
}

func (in *injector) workerKills(ctx context.Context) {
	for sleep(ctx, between(300*time.Millisecond, 1200*time.Millisecond)) {
		ws := in.st.names("worker")
		in.restart("worker", ws[rand.N(len(ws))], fWorkerKill)
	}
}

func (in *injector) apiKills(ctx context.Context) {
	for sleep(ctx, between(800*time.Millisecond, 2500*time.Millisecond)) {
		in.restart("api", "api", fAPIKill)
	}
}

func (in *injector) pgRestarts(ctx context.Context) {
	for sleep(ctx, between(in.size.pgRestartEvery/2, in.size.pgRestartEvery)) {
		in.pgMu.Lock()
		err := in.pg.RestartImmediate(context.Background())
		in.pgMu.Unlock()
		if err != nil {
			in.logf("restart: %v", err)
			continue
		}
		in.faults.add(fPGRestart, 1)
	}
}

func (in *injector) terminations(ctx context.Context) {
	for sleep(ctx, between(200*time.Millisecond, 500*time.Millisecond)) {
		n, err := in.pg.TerminateBackends(ctx)
		if err == nil {
			in.faults.add(fTerminate, n)
		}
	}
}

// stops pauses a random worker (SIGSTOP) for longer than rescue_after,
// then lets it go on (SIGCONT), one at a time.
func (in *injector) stops(ctx context.Context) {
	for sleep(ctx, between(200*time.Millisecond, time.Second)) {
		ws := in.st.names("worker")
		name := ws[rand.N(len(ws))]
		mu := in.life.of(name)
		mu.Lock()
		if err := in.st.signal(name, syscall.SIGSTOP); err != nil {
			mu.Unlock()
			continue
		}
		in.faults.add(fSIGSTOP, 1)
		// Whatever ctx says: the worker is continued.
		time.Sleep(in.size.rescueAfter + in.size.rescueAfter/4 + 500*time.Millisecond)
		_ = in.st.signal(name, syscall.SIGCONT)
		mu.Unlock()
	}
}

// locks holds ACCESS EXCLUSIVE locks on converge's busiest tables for
// lockFor at a time.
func (in *injector) locks(ctx context.Context) {
	tables := []string{"converge_streams", "converge_runs", "converge_events"}
	for i := 0; sleep(ctx, between(300*time.Millisecond, time.Second)); i++ {
		table := tables[i%len(tables)]
		err := func() error {
			cctx, cancel := context.WithTimeout(context.Background(), in.size.lockFor+30*time.Second)
			defer cancel()
			conn, err := pgx.Connect(cctx, in.pg.URL()+"&application_name=faults-lock")
			if err != nil {
				return err
			}
			defer func() { _ = conn.Close(context.Background()) }()
			tx, err := conn.BeginTx(cctx, pgx.TxOptions{AccessMode: pgx.ReadWrite})
			if err != nil {
				return err
			}
			defer func() { _ = tx.Rollback(context.Background()) }()
			if _, err := tx.Exec(cctx, "LOCK TABLE "+table+" IN ACCESS EXCLUSIVE MODE"); err != nil {
				return err
			}
			in.faults.add(fmt.Sprintf("%s (%s)", fLock, in.size.lockFor), 1)
			time.Sleep(in.size.lockFor)
			return nil
		}()
		if err != nil {
			in.logf("lock %s: %v", table, err)
		}
	}
}

// lowConnections restarts PostgreSQL with max_connections 12 (converge's
// four processes want 32), keeps it so for a while, and restores it.
func (in *injector) lowConnections(ctx context.Context) {
	for sleep(ctx, between(200*time.Millisecond, time.Second)) {
		in.pgMu.Lock()
		err := in.pg.ctl(context.Background(), "restart", "-m", "fast", "-w", "-t", "120", "-l", in.pg.srv.Dir()+"/server.log", "-o", "-c max_connections=12")
		in.pgMu.Unlock()
		if err != nil {
			in.logf("lower max_connections: %v", err)
			continue
		}
		in.faults.add(fMaxConn, 1)
		sleep(ctx, in.size.lowConnFor)
		in.pgMu.Lock()
		err = in.pg.ctl(context.Background(), "restart", "-m", "fast", "-w", "-t", "120", "-l", in.pg.srv.Dir()+"/server.log", "-o", "-c max_connections=100")
		in.pgMu.Unlock()
		if err != nil {
			in.logf("restore max_connections: %v", err)
		}
	}
}

// readOnly makes the primary read-only (as in a failover), for a while,
// and writable again.
func (in *injector) readOnly(ctx context.Context) {
	for sleep(ctx, between(500*time.Millisecond, 1500*time.Millisecond)) {
		in.pgMu.Lock()
		err := retry(func() error {
			return in.pg.Exec(context.Background(), "ALTER SYSTEM SET default_transaction_read_only = on", "SELECT pg_reload_conf()")
		})
		in.pgMu.Unlock()
		if err != nil {
			in.logf("read-only: %v", err)
			continue
		}
		in.faults.add(fReadOnly, 1)
		time.Sleep(between(in.size.readOnlyFor/2, in.size.readOnlyFor))
		in.pgMu.Lock()
		err = retry(func() error {
			return in.pg.Exec(context.Background(), "ALTER SYSTEM RESET default_transaction_read_only", "SELECT pg_reload_conf()")
		})
		in.pgMu.Unlock()
		if err != nil {
			in.logf("writable again: %v", err)
		}
	}
}

// retry calls fn until it succeeds, for up to a minute.
func retry(fn func() error) error {
	deadline := time.Now().Add(time.Minute)
	for {
		err := fn()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// keep restarts, every 300ms until ctx ends, each process that exited by
// itself (counted in stack.Exits).
func (in *injector) keep(ctx context.Context) {
	for sleep(ctx, 300*time.Millisecond) {
		in.keepOnce()
	}
}

// keepOnce restarts the processes that exited by themselves, and returns
// once each has started again (or failed to).
func (in *injector) keepOnce() {
	var wg sync.WaitGroup
	for _, name := range in.st.reap() {
		mode := "worker"
		if name == "api" {
			mode = "api"
		}
		wg.Go(func() {
			mu := in.life.of(name)
			mu.Lock()
			defer mu.Unlock()
			if err := in.st.start(mode, name); err != nil {
				in.logf("restart %s, which exited: %v", name, firstLine(err))
			}
		})
	}
	wg.Wait()
}

func firstLine(err error) string {
	s := err.Error()
	for i, r := range s {
		if r == '\n' {
			return s[:i]
		}
	}
	return s
}
