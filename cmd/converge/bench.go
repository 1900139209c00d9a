package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/converge-run/converge/bench"
)

// benchCommand is "converge bench" and its benchmarks.
func (e *env) benchCommand() *cobra.Command {
	var (
		o          bench.Options
		dbURL      string
		asJSON     bool
		cpuProfile string
		memProfile string
		private    bool
		timeout    time.Duration
	)
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Benchmark converge against anchors measured in the same run",
		Long: `Benchmarks against DATABASE_URL (or --database-url). Each run creates a
scratch database on that server, migrates it, and drops it at the end; it
never touches real data. With --private-server, or when no server is given,
it starts a PostgreSQL server of its own in a temporary folder instead,
set up for benchmarks (no checkpoint during a run), and removes it at the end. Every rate is compared with an anchor measured in
the same run: the ratio is what to compare between machines and runs.
With --json, the last line is one JSON object with rate, anchor_rate,
ratio, p50_ms, p95_ms and p99_ms.`,
	}
	flags := cmd.PersistentFlags()
	flags.StringVar(&dbURL, "database-url", "", "PostgreSQL server to benchmark on (default $DATABASE_URL)")
	flags.BoolVar(&asJSON, "json", false, "print one JSON object on the last line")
	flags.IntVar(&o.Events, "events", 0, "size: events (pipeline, ingest, storm versions per stream), dead letters (dlq), workflow runs (workflow)")
	flags.IntVar(&o.Workers, "workers", 0, "River MaxWorkers of converge and of the anchor (default 100)")
	flags.IntVar(&o.PoolSize, "pool", 0, "connection pool size of converge and of the anchor (default 30)")
	flags.DurationVar(&o.FetchCooldown, "fetch-cooldown", 0, "River fetch cooldown (default converge's river.fetch_cooldown default)")
	flags.DurationVar(&o.FetchPollInterval, "fetch-poll-interval", 0, "River fetch poll interval (default converge's default)")
	flags.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of converge's measured phase to this file")
	flags.StringVar(&memProfile, "memprofile", "", "write the allocation profile after converge's measured phase to this file, and the one before it to FILE.base (go tool pprof -sample_index=alloc_space -diff_base FILE.base FILE)")
	flags.BoolVar(&private, "private-server", false, "start a PostgreSQL server of its own for the run, with a large max_wal_size so that no checkpoint falls in a run (the default when no database URL is given)")
	flags.BoolVar(&o.Keep, "keep", false, "keep the scratch database (to look at plans afterwards); with --private-server, the stopped server's data folder")
	flags.DurationVar(&timeout, "timeout", 30*time.Minute, "give up after this long")

	run := func(name string, fn func(context.Context, bench.Options) (*bench.Result, error)) func(*cobra.Command, []string) error {
		return func(cmd *cobra.Command, _ []string) error {
			if err := checkBenchFlags(cmd); err != nil {
				return err
			}
			o.DatabaseURL = dbURL
			if o.DatabaseURL == "" {
				o.DatabaseURL = e.getenv("DATABASE_URL")
			}
			if private && dbURL != "" {
				return &usageError{fmt.Errorf("bench %s: --private-server and --database-url both name a server: give one", name)}
			}
			o.Log = e.stderr
			o.Logger = slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			if private || o.DatabaseURL == "" {
				fmt.Fprintln(e.stderr, "bench: starting a private PostgreSQL server ...")
				srv, err := bench.StartPrivateServer(ctx, o.Keep)
				if err != nil {
					return fmt.Errorf("bench %s: %w (or set DATABASE_URL)", name, err)
				}
				defer func() {
					if err := srv.Stop(ctx); err != nil {
						fmt.Fprintf(e.stderr, "bench: stop the private server: %v\n", err)
					} else if o.Keep {
						fmt.Fprintf(e.stderr, "bench: kept the private server's data folder %s (pg_ctl -D %s start)\n", srv.Dir(), srv.Dir())
					}
				}()
				o.DatabaseURL = srv.URL()
			}
			if cpuProfile != "" {
				f, err := os.Create(cpuProfile)
				if err != nil {
					return fmt.Errorf("cpu profile: %w", err)
				}
				defer f.Close()
				o.CPUProfile = f
			}
			if memProfile != "" {
				f, err := os.Create(memProfile)
				if err != nil {
					return fmt.Errorf("memory profile: %w", err)
				}
				defer f.Close()
				base, err := os.Create(memProfile + ".base")
				if err != nil {
					return fmt.Errorf("memory profile: %w", err)
				}
				defer base.Close()
				o.MemProfile, o.MemProfileBase = f, base
			}
			server := "given"
			if private || dbURL == "" && e.getenv("DATABASE_URL") == "" {
				server = "private"
			}
			res, err := fn(ctx, o)
			if err != nil {
				return fmt.Errorf("bench %s: %w", name, err)
			}
			res.Details = append(res.Details, bench.Detail{Key: "server", Label: "PostgreSQL server", Value: server})

			if err := res.WriteTable(e.stdout); err != nil {
				return err
			}
			if asJSON {
				data, err := json.Marshal(res)
				if err != nil {
					return err
				}
				fmt.Fprintln(e.stdout, string(data))
			}
			return nil
		}
	}
	var tracing bool
	// sub is a bench command: no arguments, runE runs it.
	sub := func(use, short string, runE func(*cobra.Command, []string) error) *cobra.Command {
		return &cobra.Command{Use: use, Short: short, Args: cobra.NoArgs, RunE: runE}
	}
	pipeline := sub("pipeline", "Events accepted and run end to end, against bare River draining a no-op queue (--tracing: traced against untraced)",
		func(cmd *cobra.Command, args []string) error {
			if tracing {
				return run("pipeline --tracing", bench.PipelineTracing)(cmd, args)
			}
			return run("pipeline", bench.Pipeline)(cmd, args)
		})
	pipeline.Flags().BoolVar(&tracing, "tracing", false, "measure OpenTelemetry tracing's cost: the pipeline traced (OTLP/HTTP to a receiver on loopback) against itself untraced, alternating")
	pipeline.Flags().IntVar(&o.Streams, "streams", 0, "streams the events are spread over (default 200)")
	pipeline.Flags().DurationVar(&o.Latency, "latency", 0, "the target's answer delay")
	ingest := sub("ingest", "POST /v1/events from concurrent clients, against one River insert per transaction", run("ingest", bench.Ingest))
	ingest.Flags().IntVar(&o.Clients, "clients", 0, "concurrent clients (default 64)")
	ingest.Flags().Float64Var(&o.Rate, "rate", 0, "open loop: requests per second (default closed loop)")
	ingest.Flags().IntVar(&o.Streams, "streams", 0, "streams shared by the clients' events (default a new stream per event)")
	storm := sub("storm", "Bursts of versions on 100 streams: target calls per stream, time to converge", run("storm", bench.Storm))
	storm.Flags().IntVar(&o.Streams, "streams", 0, "streams (default 100); --events is versions per stream per burst (default 50)")
	storm.Flags().IntVar(&o.Bursts, "bursts", 0, "bursts (default 3)")
	storm.Flags().DurationVar(&o.Latency, "latency", 0, "the target's answer delay (default 10ms)")
	dlq := sub("dlq", "Dead-letter list queries and the dashboard's list page over 1,000,000 dead letters", run("dlq", bench.DLQ))
	dlq.Flags().IntVar(&o.Samples, "samples", 0, "runs of each filter combination (default 20)")
	workflow := sub("workflow", "Workflow runs of a 3-step chain (a → b → c), against bench pipeline's events/s in the same run", run("workflow", bench.Workflow))
	workflow.Flags().IntVar(&o.Streams, "streams", 0, "resources the workflow runs are spread over (default 100); --events is workflow runs (default 2000)")
	workflow.Flags().DurationVar(&o.Latency, "latency", 0, "the target's answer delay")
	history := sub("history", "The pipeline and the dead-letter list over a long history (--events, default 2,000,000), against an empty database; then a prune under load", run("history", bench.History))
	history.Flags().IntVar(&o.Samples, "samples", 0, "runs of each dead-letter list query (default 20)")
	soak := sub("soak", "A constant rate for --duration with a short retention: table sizes must level off", run("soak", bench.Soak))
	soak.Flags().DurationVar(&o.Duration, "duration", 0, "how long (default 10m)")
	soak.Flags().Float64Var(&o.Rate, "rate", 0, "events per second (default 50)")
	soak.Flags().DurationVar(&o.Retention.Runs, "retain", 0, "retention of runs, dead letters, workflow runs, deliveries and audit (default 1m)")
	soak.Flags().DurationVar(&o.Retention.Interval, "prune-interval", 0, "retention.interval (default 10s)")
	cmd.AddCommand(pipeline, ingest, storm, dlq, workflow, history, soak)
	return cmd
}

// benchNumberFlags are the bench flags that take a number or a duration.
var benchNumberFlags = []string{"events", "workers", "pool", "fetch-cooldown", "fetch-poll-interval", "timeout",
	"streams", "latency", "clients", "rate", "bursts", "samples", "duration", "retain", "prune-interval"}

// checkBenchFlags is a usage error for a negative number or duration given
// to a bench flag (SPEC §8: a bad flag value exits 2); 0 means the
// default, and a negative value was taken as 0.
func checkBenchFlags(cmd *cobra.Command) error {
	for _, name := range benchNumberFlags {
		if f := cmd.Flags().Lookup(name); f != nil && f.Changed && strings.HasPrefix(strings.TrimSpace(f.Value.String()), "-") {
			return &usageError{fmt.Errorf("--%s must not be negative", name)}
		}
	}
	return nil
}
