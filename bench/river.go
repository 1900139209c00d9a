package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/converge-run/converge/target"
)

// anchorQueue is the River queue the anchors work, apart from converge's.
const anchorQueue = "bench_anchor"

// anchorArgs is the anchors' job: a stream and version, as converge's
// target sees them, so that an anchor can call the same target.
type anchorArgs struct {
	Resource string `json:"resource"`
	Version  int64  `json:"version"`
}

func (anchorArgs) Kind() string { return "bench_anchor" }

// anchorWorker does nothing, or calls a target when call is set.
type anchorWorker struct {
	river.WorkerDefaults[anchorArgs]
	call target.Target
}

func (w *anchorWorker) Work(ctx context.Context, job *river.Job[anchorArgs]) error {
	if w.call == nil {
		return nil
	}
	_, err := w.call.Call(ctx, target.Request{Attempt: job.Attempt, Kind: "bench", Resource: job.Args.Resource, Version: job.Args.Version, Payload: json.RawMessage(`{}`)})
	return err
}

// riverDrain is the bare-River anchor: it inserts the jobs of args into
// anchorQueue, then starts a client with a worker that does nothing (or
// calls call) and the same pool size, MaxWorkers and fetch settings as
// converge, and returns how long the client took from start until every
// job completed.
func riverDrain(ctx context.Context, s *scratch, o Options, args []anchorArgs, call target.Target) (time.Duration, cpuUsage, error) {
	var cpu cpuUsage
	pool, err := s.pool(ctx, o.PoolSize)
	if err != nil {
		return 0, cpu, err
	}
	defer pool.Close()
	workers := river.NewWorkers()
	river.AddWorker(workers, &anchorWorker{call: call})
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Logger:            o.Logger,
		Queues:            map[string]river.QueueConfig{anchorQueue: {MaxWorkers: o.Workers}},
		Workers:           workers,
		FetchCooldown:     o.FetchCooldown,
		FetchPollInterval: o.FetchPollInterval,
	})
	if err != nil {
		return 0, cpu, fmt.Errorf("anchor client: %w", err)
	}
	const chunk = 5000
	for i := 0; i < len(args); i += chunk {
		params := make([]river.InsertManyParams, 0, chunk)
		for _, a := range args[i:min(i+chunk, len(args))] {
			params = append(params, river.InsertManyParams{Args: a, InsertOpts: &river.InsertOpts{Queue: anchorQueue}})
		}
		if _, err := client.InsertManyFast(ctx, params); err != nil {
			return 0, cpu, fmt.Errorf("insert anchor jobs: %w", err)
		}
	}
	events, cancel := client.SubscribeConfig(&river.SubscribeConfig{Kinds: []river.EventKind{river.EventKindJobCompleted}, ChanSize: len(args) + 1000})
	defer cancel()
	meter := startCPU(ctx, pool)
	start := time.Now()
	if err := client.Start(ctx); err != nil {
		return 0, cpu, fmt.Errorf("start anchor client: %w", err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = client.Stop(sctx)
	}()
	for done := 0; done < len(args); {
		select {
		case <-ctx.Done():
			return 0, cpu, fmt.Errorf("anchor: %d of %d jobs done: %w", done, len(args), ctx.Err())
		case ev := <-events:
			if ev.Job.Queue == anchorQueue {
				done++
			}
		}
	}
	elapsed := time.Since(start)
	return elapsed, meter.stop(ctx), nil
}

// noopTarget is an in-process HTTP target answering 200 {} after delay. It
// counts calls, per resource too when perResource is set.
type noopTarget struct {
	srv   *httptest.Server
	calls atomic.Int64
	delay time.Duration

	mu          sync.Mutex
	perResource map[string]int
	track       bool
}

func newNoopTarget(delay time.Duration, track bool) *noopTarget {
	t := &noopTarget{delay: delay, track: track, perResource: map[string]int{}}
	t.srv = httptest.NewServer(http.HandlerFunc(t.serve))
	return t
}

func (t *noopTarget) serve(w http.ResponseWriter, r *http.Request) {
	t.calls.Add(1)
	if t.track {
		var b struct {
			Resource string `json:"resource"`
		}
		if err := json.NewDecoder(r.Body).Decode(&b); err == nil {
			t.mu.Lock()
			t.perResource[b.Resource]++
			t.mu.Unlock()
		}
	}
	if t.delay > 0 {
		select {
		case <-time.After(t.delay):
		case <-r.Context().Done():
			return
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte("{}"))
}

// takeCounts returns the calls per resource since the last take and resets
// them.
func (t *noopTarget) takeCounts() map[string]int {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := t.perResource
	t.perResource = map[string]int{}
	return m
}

func (t *noopTarget) close() { t.srv.Close() }

// httpTarget is converge's HTTP target pointed at t.
func (t *noopTarget) httpTarget() (target.Target, error) {
	return target.NewHTTP(target.HTTPConfig{URL: t.srv.URL + "/bench", Timeout: 30 * time.Second})
}
