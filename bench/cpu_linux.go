package bench

import (
	"context"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// clockTick is the unit of /proc/<pid>/stat's CPU times (USER_HZ, 100 on
// every Linux this runs on).
const clockTick = 10 * time.Millisecond

// processCPU is the CPU time (user and system) this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// backendCPU is the CPU time used so far by the server process of each
// session connected to pool's database, by process id, read from /proc: it
// works when the server runs on this machine, and is nil otherwise.
func backendCPU(ctx context.Context, pool *pgxpool.Pool) map[int32]time.Duration {
	rows, err := pool.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = current_database()`)
	if err != nil {
		return nil
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil || len(pids) == 0 {
		return nil
	}
	cpu := map[int32]time.Duration{}
	for _, pid := range pids {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(int(pid)) + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		// The command name (field 2) is in parentheses and may hold
		// spaces; utime and stime are fields 14 and 15.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			return nil
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 13 {
			return nil
		}
		u, err1 := strconv.ParseInt(f[11], 10, 64)
		st, err2 := strconv.ParseInt(f[12], 10, 64)
		if err1 != nil || err2 != nil {
			return nil
		}
		cpu[pid] = time.Duration(u+st) * clockTick
	}
	return cpu
}
