package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/api"
	"github.com/converge-run/converge/config"
)

// Ingest defaults and goals.
const (
	DefaultIngestEvents = 20000
	// IngestGoal is the ratio to the anchor ingest aims at, and
	// IngestP99Goal its p99 latency at 64 clients.
	IngestGoal    = 0.8
	IngestP99Goal = 100 * time.Millisecond
)

// Ingest measures POST /v1/events against converge's real HTTP API, served
// in-process on a loopback port by an API-only instance (no workers, as an
// `converge api` process), authenticated with a stored submitter token.
// o.Clients clients send o.Events events in a closed loop (each sends its
// next request when the previous is answered) or, with o.Rate, in an open
// loop at that rate (latency then counts from when a request was due, so
// that a stall is not hidden). Every event is of a new stream by default;
// with o.Streams each client cycles through its share of that many streams
// with rising versions, so that each accept supersedes the stream's queued
// run.
//
// The anchor is the floor under any durable accept: one River InsertTx per
// transaction from as many goroutines, with the same pool size, in the same
// database, before and after converge (its rate is the mean of both).
func Ingest(ctx context.Context, o Options) (*Result, error) {
	o = o.withDefaults()
	if o.Events <= 0 {
		o.Events = DefaultIngestEvents
	}
	if o.Streams > 0 && o.Streams < o.Clients {
		o.Streams = o.Clients
	}
	return withScratch(ctx, o, func(s *scratch) (*Result, error) {
		loop := fmt.Sprintf("closed loop, %d clients", o.Clients)
		if o.Rate > 0 {
			loop = fmt.Sprintf("open loop, %.0f requests/s", o.Rate)
		}
		o.logf("anchor: River InsertTx per transaction, %d events, %s", o.Events, loop)
		a1, err := ingestAnchor(ctx, s, o, 0)
		if err != nil {
			return nil, err
		}
		o.logf("anchor: %.0f inserts/s, p99 %s", a1.rate(), a1.p99())
		o.logf("converge: POST /v1/events, %d events, %s", o.Events, loop)
		var conv loadRun
		err = o.profile(func() error {
			var err error
			conv, err = ingestConverge(ctx, s, o)
			return err
		})
		if err != nil {
			return nil, err
		}
		o.logf("converge: %.0f events/s, p99 %s", conv.rate(), conv.p99())
		a2, err := ingestAnchor(ctx, s, o, o.Events)
		if err != nil {
			return nil, err
		}
		o.logf("anchor again: %.0f inserts/s, p99 %s", a2.rate(), a2.p99())

		r := &Result{
			Benchmark: "ingest", RateUnit: "events/s",
			Rate:       conv.rate(),
			AnchorRate: (a1.rate() + a2.rate()) / 2,
			Anchor:     "one River InsertTx per transaction, same clients and pool",
			Latency:    "POST /v1/events, client side",
			Goal:       fmt.Sprintf("ratio >= %.2f and p99 < %s at 64 clients", IngestGoal, IngestP99Goal),
		}
		r.Ratio = ratio(r.Rate, r.AnchorRate)
		r.P50, r.P95, r.P99 = percentiles(conv.latencies)
		r.GoalMet = r.Ratio >= IngestGoal && r.P99 < IngestP99Goal
		r.add("events", "events", o.Events)
		r.add("clients", "clients", o.Clients)
		if o.Rate > 0 {
			r.add("offered_rate", "offered rate (requests/s)", o.Rate)
		}
		r.add("streams", "streams (0: a new one per event)", o.Streams)
		r.add("pool_size", "pool size", o.PoolSize)
		r.add("elapsed_ms", "converge elapsed", conv.elapsed)
		r.add("anchor_rate_before", "anchor before (inserts/s)", round(a1.rate(), 1))
		r.add("anchor_rate_after", "anchor after (inserts/s)", round(a2.rate(), 1))
		ap50, ap95, ap99 := percentiles(append(a1.latencies, a2.latencies...))
		r.add("anchor_p50_ms", "anchor p50", ap50)
		r.add("anchor_p95_ms", "anchor p95", ap95)
		r.add("anchor_p99_ms", "anchor p99", ap99)
		addCPU(r, conv.cpu, a1.cpu.plus(a2.cpu), o.Events, 2*o.Events)
		return r, nil
	})
}

// loadRun is what one side of a load test measured.
type loadRun struct {
	n         int
	elapsed   time.Duration
	latencies []time.Duration
	cpu       cpuUsage
}

func (l loadRun) rate() float64 { return perSecond(l.n, l.elapsed) }

func (l loadRun) p99() time.Duration { return percentile(l.latencies, 99) }

// drive runs op(i) for i in [0, n): closed loop from clients goroutines, or
// open loop at rate per second. It returns the wall time and the latency of
// each op; the first error stops it.
func drive(ctx context.Context, n, clients int, rate float64, op func(ctx context.Context, client, i int) error) (loadRun, error) {
	out := loadRun{n: n, latencies: make([]time.Duration, n)}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	start := time.Now()
	if rate <= 0 {
		// Client c sends ops c, c+clients, c+2·clients, ... in turn.
		for c := range clients {
			wg.Go(func() {
				for i := c; i < n; i += clients {
					if ctx.Err() != nil {
						return
					}
					t0 := time.Now()
					if err := op(ctx, c, i); err != nil {
						cancel(err)
						return
					}
					out.latencies[i] = time.Since(t0)
				}
			})
		}
	} else {
		interval := time.Duration(float64(time.Second) / rate)
		for i := range n {
			due := start.Add(time.Duration(i) * interval)
			if d := time.Until(due); d > 0 {
				select {
				case <-time.After(d):
				case <-ctx.Done():
				}
			}
			if ctx.Err() != nil {
				break
			}
			wg.Go(func() {
				if err := op(ctx, i%clients, i); err != nil {
					cancel(err)
					return
				}
				out.latencies[i] = time.Since(due)
			})
		}
	}
	wg.Wait()
	out.elapsed = time.Since(start)
	if err := context.Cause(ctx); err != nil {
		return out, err
	}
	return out, nil
}

// ingestEvent returns the resource and version of event i sent by client c.
func ingestEvent(o Options, c, i int) (string, int64) {
	if o.Streams <= 0 {
		return "bench/e" + strconv.Itoa(i), 1
	}
	// Client c owns streams c, c+C, c+2C, ... and sends to them in turn;
	// its requests are sequential in a closed loop, so versions rise (in
	// an open loop two of them may cross, and the later one is stale).
	per := o.Streams / o.Clients
	k := i / o.Clients // the client's k-th request, in a closed loop
	return "bench/s" + strconv.Itoa(c+(k%per)*o.Clients), int64(k/per + 1)
}

// ingestAnchor inserts o.Events jobs, one InsertTx per transaction. offset
// keeps the second run's jobs apart from the first's.
func ingestAnchor(ctx context.Context, s *scratch, o Options, offset int) (loadRun, error) {
	pool, err := s.pool(ctx, o.PoolSize)
	if err != nil {
		return loadRun{}, err
	}
	defer pool.Close()
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Logger: o.Logger, FetchCooldown: o.FetchCooldown, FetchPollInterval: o.FetchPollInterval})
	if err != nil {
		return loadRun{}, fmt.Errorf("anchor client: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		return loadRun{}, fmt.Errorf("anchor pool: %w", err)
	}
	meter := startCPU(ctx, pool)
	run, err := drive(ctx, o.Events, o.Clients, o.Rate, func(ctx context.Context, c, i int) error {
		res, v := ingestEvent(o, c, i+offset)
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := client.InsertTx(ctx, tx, anchorArgs{Resource: res, Version: v}, &river.InsertOpts{Queue: anchorQueue})
			return err
		})
	})
	run.cpu = meter.stop(ctx)
	return run, err
}

// ingestConverge posts o.Events events to an in-process API.
func ingestConverge(ctx context.Context, s *scratch, o Options) (loadRun, error) {
	in, err := startInstance(ctx, s, o, nil)
	if err != nil {
		return loadRun{}, err
	}
	defer in.stop(ctx)
	token, _, err := in.store.TokenCreate(ctx, "bench", converge.RoleSubmitter, converge.AuditEntry{Actor: "bench", Role: string(converge.RoleOperator)})
	if err != nil {
		return loadRun{}, err
	}
	// Accepts are group-committed, as `converge api` has them
	// (cmd/converge passes the jobs service's group commit).
	handler := api.New(api.Config{
		Store: in.store, Accept: in.accept, Kinds: converge.KindPolicies{benchKind: benchPolicy(o)},
		MaxPayloadBytes: config.DefaultMaxPayloadBytes, Logger: o.Logger,
	})
	srv := httptest.NewServer(handler)
	defer srv.Close()
	transport := &http.Transport{MaxIdleConns: o.Clients * 2, MaxIdleConnsPerHost: o.Clients * 2, IdleConnTimeout: time.Minute}
	defer transport.CloseIdleConnections()
	hc := &http.Client{Transport: transport, Timeout: time.Minute}
	url := srv.URL + "/v1/events"
	meter := startCPU(ctx, in.pool)
	run, err := drive(ctx, o.Events, o.Clients, o.Rate, func(ctx context.Context, c, i int) error {
		res, v := ingestEvent(o, c, i)
		body := `{"kind":"` + benchKind + `","resource":"` + res + `","version":` + strconv.FormatInt(v, 10) + `,"payload":{"image":"registry.example/app@sha256:0123456789abcdef"}}`
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewBufferString(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := hc.Do(req)
		if err != nil {
			return fmt.Errorf("post event: %w", err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusConflict && o.Rate > 0 && o.Streams > 0 {
			return nil
		}
		if resp.StatusCode != http.StatusAccepted {
			return fmt.Errorf("post event %s@%d: status %d: %s", res, v, resp.StatusCode, data)
		}
		return nil
	})
	run.cpu = meter.stop(ctx)
	return run, err
}
