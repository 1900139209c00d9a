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
	pool    *pgxpool.Pool
	client  time.Duration
	backend map[int32]time.Duration
}

// cpuUsage is what a cpuMeter measured. Server is zero when unknown.
type cpuUsage struct {
	Client, Server time.Duration
}

func startCPU(ctx context.Context, pool *pgxpool.Pool) *cpuMeter {
	return &cpuMeter{pool: pool, client: processCPU(), backend: backendCPU(ctx, pool)}
}

// stop returns the CPU used since start. Sessions that ended meanwhile are
// not counted; those that began are, whole.
func (m *cpuMeter) stop(ctx context.Context) cpuUsage {
	u := cpuUsage{Client: processCPU() - m.client}
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
}
