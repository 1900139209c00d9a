package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/config"
	"github.com/converge-run/converge/migrations"
	"github.com/converge-run/converge/pgserver"
)

// Options are the settings every benchmark shares. Zero values take the
// defaults documented on each field.
type Options struct {
	// DatabaseURL is a server to create the scratch database on (any
	// database of it the role can connect to; it needs CREATEDB).
	DatabaseURL string
	// Events is the benchmark's size; each benchmark has its own default.
	Events int
	// Workers is the River MaxWorkers of the queue worked (converge's kind
	// concurrency and the anchor's queue); default 100.
	Workers int
	// PoolSize is the connection pool size of converge and of the anchor;
	// default 30, what `converge worker` uses.
	PoolSize int
	// FetchCooldown and FetchPollInterval are River's fetch settings, for
	// converge and the anchor alike; default converge's configuration
	// defaults.
	FetchCooldown     time.Duration
	FetchPollInterval time.Duration
	// Streams is the number of streams (pipeline, ingest); each benchmark
	// has its own default.
	Streams int
	// Clients is the number of concurrent clients (ingest); default 64.
	Clients int
	// Rate, when above zero, makes ingest an open loop of this many
	// requests per second.
	Rate float64
	// Latency is the no-op target's answer delay (storm: default 10ms;
	// pipeline: 0).
	Latency time.Duration
	// Bursts is the number of bursts of the storm; default 3.
	Bursts int
	// Samples is how many times each dead-letter query runs; default 20.
	Samples int
	// Duration is how long a benchmark that runs for a time runs (soak:
	// default 10m).
	Duration time.Duration
	// Retention is the retention of the converge instances the
	// benchmarks start (zero: kept forever, no pruning job); soak sets a
	// short one of its own when this is zero.
	Retention converge.Retention
	// Keep leaves the scratch database in place (for EXPLAIN afterwards).
	Keep bool
	// CPUProfile, when set, receives a CPU profile of converge's measured
	// phase.
	CPUProfile io.Writer
	// MemProfile and MemProfileBase, when set, receive the allocation
	// profile ("allocs") after and before converge's measured phase: the
	// phase's own allocations are their difference (go tool pprof
	// -diff_base). The sampling rate is runtime.MemProfileRate's.
	MemProfile, MemProfileBase io.Writer
	// Log receives progress lines; Logger River's and converge's warnings.
	Log    io.Writer
	Logger *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.Workers <= 0 {
		o.Workers = 100
	}
	if o.PoolSize <= 0 {
		o.PoolSize = 30
	}
	if o.FetchCooldown <= 0 {
		o.FetchCooldown = config.DefaultFetchCooldown
	}
	if o.FetchPollInterval <= 0 {
		o.FetchPollInterval = config.DefaultFetchPoll
	}
	if o.FetchPollInterval < o.FetchCooldown {
		o.FetchPollInterval = o.FetchCooldown
	}
	if o.Clients <= 0 {
		o.Clients = 64
	}
	if o.Bursts <= 0 {
		o.Bursts = 3
	}
	if o.Samples <= 0 {
		o.Samples = 20
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

func (o Options) logf(format string, args ...any) {
	fmt.Fprintf(o.Log, "bench: "+format+"\n", args...)
}

// profile runs fn under the CPU profiler, and between two allocation
// profiles, when they are asked for.
func (o Options) profile(fn func() error) error {
	if o.MemProfileBase != nil {
		runtime.GC() // the profile counts allocations up to the last GC
		if err := pprof.Lookup("allocs").WriteTo(o.MemProfileBase, 0); err != nil {
			return fmt.Errorf("write allocation profile: %w", err)
		}
	}
	if o.CPUProfile != nil {
		if err := pprof.StartCPUProfile(o.CPUProfile); err != nil {
			return fmt.Errorf("start cpu profile: %w", err)
		}
	}
	err := fn()
	if o.CPUProfile != nil {
		pprof.StopCPUProfile()
	}
	if o.MemProfile != nil {
		runtime.GC()
		if werr := pprof.Lookup("allocs").WriteTo(o.MemProfile, 0); werr != nil && err == nil {
			err = fmt.Errorf("write allocation profile: %w", werr)
		}
	}
	return err
}

// scratch is a migrated database made for one benchmark run.
type scratch struct {
	admin string // the server URL the database was created from
	name  string
	url   string
}

// newScratch creates and migrates a database named converge_bench_* on the
// server behind adminURL.
func newScratch(ctx context.Context, o Options) (*scratch, error) {
	if o.DatabaseURL == "" {
		return nil, fmt.Errorf("no database URL: set DATABASE_URL or --database-url")
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := "converge_bench_" + strconv.FormatInt(time.Now().Unix(), 36) + "_" + hex.EncodeToString(b)
	u, err := url.Parse(o.DatabaseURL)
	if err != nil || u.Host == "" && u.Path == "" {
		return nil, fmt.Errorf("database url must be a postgres:// URL")
	}
	u.Path = "/" + name
	u.RawPath = ""
	s := &scratch{admin: o.DatabaseURL, name: name, url: u.String()}
	sweepScratch(ctx, o.DatabaseURL)
	if err := pgserver.CreateDatabase(ctx, o.DatabaseURL, name, ""); err != nil {
		return nil, fmt.Errorf("create scratch database: %w", err)
	}
	o.logf("scratch database %s", name)
	if err := migrations.Up(ctx, s.url); err != nil {
		_ = s.drop(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("migrate scratch database: %w", err)
	}
	return s, nil
}

// sweepScratch drops, best effort, scratch databases left by benchmark runs
// that were killed: those over a day old (by the time in their name) that
// nobody is connected to. A --keep database is kept for that long.
func sweepScratch(ctx context.Context, adminURL string) {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	rows, err := conn.Query(ctx, `SELECT datname FROM pg_database d WHERE datname LIKE 'converge\_bench\_%'
		AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.datid = d.oid)`)
	if err != nil {
		return
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return
	}
	for _, name := range names {
		parts := strings.Split(name, "_")
		if len(parts) != 4 {
			continue
		}
		secs, err := strconv.ParseInt(parts[2], 36, 64)
		if err == nil && time.Since(time.Unix(secs, 0)) > 24*time.Hour {
			_ = pgserver.DropDatabase(ctx, adminURL, name)
		}
	}
}

// close drops the database unless o.Keep.
func (s *scratch) close(ctx context.Context, o Options) error {
	if o.Keep {
		o.logf("kept scratch database %s", s.name)
		return nil
	}
	return s.drop(ctx)
}

func (s *scratch) drop(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	return pgserver.DropDatabase(ctx, s.admin, s.name)
}

// pool opens a pool of size conns on the scratch database.
func (s *scratch) pool(ctx context.Context, conns int) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(s.url)
	if err != nil {
		return nil, fmt.Errorf("parse scratch url: %w", err)
	}
	cfg.MaxConns = int32(conns)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open pool: %w", err)
	}
	return pool, nil
}

// withScratch runs fn on a fresh scratch database and drops it afterwards.
func withScratch(ctx context.Context, o Options, fn func(*scratch) (*Result, error)) (res *Result, err error) {
	s, err := newScratch(ctx, o)
	if err != nil {
		return nil, err
	}
	defer func() {
		if cerr := s.close(ctx, o); cerr != nil && err == nil {
			err = fmt.Errorf("drop scratch database: %w", cerr)
		}
	}()
	before := loadAverage()
	res, err = fn(s)
	if res != nil && before != "" {
		res.add("load_average", "load average (1m, before/after)", before+" / "+loadAverage())
	}
	return res, err
}

// loadAverage is the machine's one-minute load average, "" where unknown:
// the benchmarks run on shared machines, and this says how shared.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return ""
	}
	return f[0]
}
