package bench

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/converge-run/converge/pgserver"
)

// PrivateServerSettings are the postgresql.conf settings of the private
// server StartPrivateServer starts, beside PostgreSQL's defaults (durable
// commits, shared_buffers 128MB).
//
// The WAL settings keep checkpoints out of a run: with the default
// max_wal_size of 1GB a server that benchmarks write gigabytes of WAL to
// checkpoints every few runs, and a phase that starts after one pays a
// full-page image for each page it touches first (a CHECKPOINT before each
// phase put the pipeline's server CPU per event from 247–262 to 305 µs,
// docs/benchmarks.md). autovacuum is off as on the server the recorded
// figures were taken on (bench dlq runs VACUUM ANALYZE itself).
var PrivateServerSettings = []string{
	"max_wal_size = '8GB'",
	"min_wal_size = '1GB'",
	"checkpoint_timeout = '1h'",
	"autovacuum = off",
	"max_connections = 200",
}

// PrivateServer is a PostgreSQL cluster started for one benchmark run.
type PrivateServer struct {
	srv  *pgserver.Server
	dir  string
	keep bool
}

// StartPrivateServer starts a PostgreSQL cluster of the machine's binaries
// in a new temporary folder, with PrivateServerSettings. Stop stops it and
// removes the folder unless keep.
func StartPrivateServer(ctx context.Context, keep bool) (*PrivateServer, error) {
	dir, err := os.MkdirTemp("", "converge-bench-pg-")
	if err != nil {
		return nil, fmt.Errorf("private server: %w", err)
	}
	srv, err := pgserver.Start(ctx, pgserver.StartOptions{Dir: dir, Settings: PrivateServerSettings})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("private server: %w", err)
	}
	return &PrivateServer{srv: srv, dir: dir, keep: keep}, nil
}

// URL is the server's connection URL, to its postgres database.
func (p *PrivateServer) URL() string {
	return p.srv.URL("postgres")
}

// Dir is the cluster's data folder.
func (p *PrivateServer) Dir() string {
	return p.dir
}

// Stop stops the server and removes its folder, unless it was started to
// be kept.
func (p *PrivateServer) Stop(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if err := p.srv.Stop(ctx); err != nil {
		return err
	}
	if p.keep {
		return nil
	}
	return os.RemoveAll(p.dir)
}
