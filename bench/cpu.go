package bench

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// cpuMeter measures the CPU time a phase of a benchmark used: this
// process's, and that of the database server's sessions on one pool's
// database when the server runs on this machine. CPU time per job is much
// less sensitive to other load on a shared machine than a rate is.
type cpuMeter struct {
	pool        *pgxpool.Pool
	client      time.Duration
	backend     map[int32]time.Duration
	checkpoints int64 // -1: unknown
}

// cpuUsage is what a cpuMeter measured. Server is zero when unknown.
// Checkpoints is how many checkpoints the server started meanwhile (-1:
// unknown): a phase that takes one pays a full-page image for each page it
// touches first, and its server CPU shows it.
type cpuUsage struct {
	Client, Server time.Duration
	Checkpoints    int64
}

// plus is u and v together, as for two runs of an anchor.
func (u cpuUsage) plus(v cpuUsage) cpuUsage {
	sum := cpuUsage{Client: u.Client + v.Client, Server: u.Server + v.Server, Checkpoints: u.Checkpoints + v.Checkpoints}
	if u.Checkpoints < 0 || v.Checkpoints < 0 {
		sum.Checkpoints = -1
	}
	return sum
}

func startCPU(ctx context.Context, pool *pgxpool.Pool) *cpuMeter {
	return &cpuMeter{pool: pool, client: processCPU(), backend: backendCPU(ctx, pool), checkpoints: checkpoints(ctx, pool)}
}

// checkpoints is the number of checkpoints the server has started since
// its statistics were reset, or -1 when it cannot be read: from
// pg_stat_bgwriter up to PostgreSQL 16, pg_stat_checkpointer from 17.
func checkpoints(ctx context.Context, pool *pgxpool.Pool) int64 {
	var n int64
	for _, q := range []string{
		`SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter`,
		`SELECT num_timed + num_requested FROM pg_stat_checkpointer`,
	} {
		if err := pool.QueryRow(ctx, q).Scan(&n); err == nil {
			return n
		}
	}
	return -1
}

// stop returns the CPU used since start. Sessions that ended meanwhile are
// not counted; those that began are, whole.
func (m *cpuMeter) stop(ctx context.Context) cpuUsage {
	u := cpuUsage{Client: processCPU() - m.client, Checkpoints: -1}
	if n := checkpoints(ctx, m.pool); n >= 0 && m.checkpoints >= 0 {
		u.Checkpoints = n - m.checkpoints
	}
	for pid, t := range backendCPU(ctx, m.pool) {
		u.Server += t - m.backend[pid]
	}
	return u
}

// perJob is u divided among n jobs, in microseconds: client, server.
func (u cpuUsage) perJob(n int) (client, server float64) {
	if n == 0 {
		return 0, 0
	}
	return float64(u.Client.Microseconds()) / float64(n), float64(u.Server.Microseconds()) / float64(n)
}

// addCPU adds the CPU time per job of converge (n jobs) and of the anchor
// (an jobs) to r, and their ratio when the server's share is known.
func addCPU(r *Result, conv, anchor cpuUsage, n, an int) {
	cc, cs := conv.perJob(n)
	ac, as := anchor.perJob(an)
	r.add("cpu_us_per_job_client", "CPU per job, this process (µs)", round(cc, 1))
	r.add("anchor_cpu_us_per_job_client", "anchor CPU per job, this process (µs)", round(ac, 1))
	if cs > 0 && as > 0 {
		r.add("cpu_us_per_job_server", "CPU per job, database sessions (µs)", round(cs, 1))
		r.add("anchor_cpu_us_per_job_server", "anchor CPU per job, database sessions (µs)", round(as, 1))
		r.add("cpu_ratio", "CPU ratio (anchor per job / converge per job)", round((ac+as)/(cc+cs), 3))
	}
	if conv.Checkpoints >= 0 && anchor.Checkpoints >= 0 {
		r.add("checkpoints", "checkpoints in converge's phase", conv.Checkpoints)
		r.add("anchor_checkpoints", "checkpoints in the anchor's phases", anchor.Checkpoints)
	}
}
