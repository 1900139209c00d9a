package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/config"
	"github.com/converge-run/converge/store"
	"github.com/converge-run/converge/telemetry"
)

// Pipeline defaults.
const (
	DefaultPipelineEvents  = 20000
	DefaultPipelineStreams = 200
	// PipelineGoal is the ratio to bare River the pipeline aims at.
	PipelineGoal = 0.35
)

// Pipeline measures converge end to end: o.Events events over o.Streams
// streams go through the real accept path (store.EventAccept) and are run
// by the real workers (jobs.NewClient with Work, the reconciler running)
// against an in-process HTTP target answering 200 {}. Each stream is a
// source of its own (a goroutine) that sends its next version when its
// previous run has finished, so that every event runs (none is superseded)
// while up to o.Streams events are in flight. The rate is events finished
// per second from the first accept to the last finish.
//
// The anchor is bare River draining as many jobs with a worker that does
// nothing, with the same pool size, MaxWorkers and fetch settings, in the
// same database; it runs before and after converge and its rate is the
// mean of both, so that drift in the machine's load during the run
// affects both sides alike.
func Pipeline(ctx context.Context, o Options) (*Result, error) {
	o = o.withDefaults()
	if o.Events <= 0 {
		o.Events = DefaultPipelineEvents
	}
	if o.Streams <= 0 {
		o.Streams = DefaultPipelineStreams
	}
	o.Streams = min(o.Streams, o.Events)
	return withScratch(ctx, o, func(s *scratch) (*Result, error) {
		args := make([]anchorArgs, o.Events)
		for i := range args {
			args[i] = anchorArgs{Resource: resourceName(i % o.Streams), Version: int64(i/o.Streams + 1)}
		}
		o.logf("anchor: bare River, %d jobs, %d workers, pool %d, fetch cooldown %s", o.Events, o.Workers, o.PoolSize, o.FetchCooldown)
		a1, a1CPU, err := riverDrain(ctx, s, o, args, nil)
		if err != nil {
			return nil, err
		}
		o.logf("anchor: %.0f jobs/s", perSecond(o.Events, a1))

		o.logf("converge: %d events over %d streams", o.Events, o.Streams)
		var conv pipelineRun
		err = o.profile(func() error {
			var err error
			conv, err = pipelineConverge(ctx, s, o)
			return err
		})
		if err != nil {
			return nil, err
		}
		o.logf("converge: %.0f events/s", perSecond(o.Events, conv.elapsed))

		a2, a2CPU, err := riverDrain(ctx, s, o, args, nil)
		if err != nil {
			return nil, err
		}
		o.logf("anchor again: %.0f jobs/s", perSecond(o.Events, a2))

		o.logf("naive anchor: River by hand, %d events over %d streams, the same target", o.Events, o.Streams)
		naive, err := pipelineNaive(ctx, s, o)
		if err != nil {
			return nil, err
		}
		o.logf("naive anchor: %.0f events/s", perSecond(o.Events, naive.elapsed))

		r := &Result{
			Benchmark: "pipeline", RateUnit: "jobs/s",
			Rate:       perSecond(o.Events, conv.elapsed),
			AnchorRate: (perSecond(o.Events, a1) + perSecond(o.Events, a2)) / 2,
			Anchor:     "bare River, no-op worker, same pool, workers and fetch settings",
			Latency:    "accept to finish (runs.created_at to finished_at)",
			Goal:       fmt.Sprintf("ratio >= %.2f", PipelineGoal),
		}
		r.Ratio = ratio(r.Rate, r.AnchorRate)
		r.GoalMet = r.Ratio >= PipelineGoal
		r.P50, r.P95, r.P99 = percentiles(conv.latencies)
		r.add("events", "events", o.Events)
		r.add("streams", "streams", o.Streams)
		r.addRiverSettings(o, "workers (River MaxWorkers)")
		r.add("elapsed_ms", "converge elapsed", conv.elapsed)
		r.add("anchor_rate_before", "anchor before (jobs/s)", round(perSecond(o.Events, a1), 1))
		r.add("anchor_rate_after", "anchor after (jobs/s)", round(perSecond(o.Events, a2), 1))
		r.add("target_calls", "target calls", conv.calls)
		r.add("runs_succeeded", "runs succeeded", conv.byStatus[string(converge.RunSucceeded)])
		r.add("accept_p50_ms", "EventAccept p50", percentile(conv.accepts, 50))
		r.add("accept_p99_ms", "EventAccept p99", percentile(conv.accepts, 99))
		r.add("batch_fallbacks", "group-commit batches that failed and were redone call by call (want 0)", conv.fallbacks)
		addCPU(r, conv.cpu, a1CPU.plus(a2CPU), o.Events, 2*o.Events)
		naiveRate := perSecond(o.Events, naive.elapsed)
		r.add("naive_anchor_rate", "naive anchor: River by hand (event row + job in one transaction, outcome UPDATE in JobCompleteTx), events/s", round(naiveRate, 1))
		r.add("naive_ratio", "converge / naive anchor (goal >= 2.0)", round(ratio(r.Rate, naiveRate), 3))
		_, _, naiveP99 := percentiles(naive.latencies)
		r.add("naive_p99_ms", "naive anchor p99 (insert to completion)", naiveP99)
		nc, ns := naive.cpu.perJob(o.Events)
		r.add("naive_cpu_us_per_event", "naive anchor CPU per event, client + server (µs)", round(nc+ns, 1))
		return r, nil
	})
}

// pipelineNaive runs the hand-written anchor of Pipeline against a target
// of its own, like converge's.
func pipelineNaive(ctx context.Context, s *scratch, o Options) (naiveResult, error) {
	tgt := newNoopTarget(o.Latency, false)
	defer tgt.close()
	ht, err := tgt.httpTarget()
	if err != nil {
		return naiveResult{}, err
	}
	var out naiveResult
	out.elapsed, out.latencies, out.cpu, err = naiveRun(ctx, s, o, ht)
	return out, err
}

// naiveResult is what the hand-written anchor measured.
type naiveResult struct {
	elapsed   time.Duration
	latencies []time.Duration
	cpu       cpuUsage
}

type pipelineRun struct {
	elapsed   time.Duration
	latencies []time.Duration
	byStatus  map[string]int
	calls     int64
	accepts   []time.Duration // EventAccept's latency
	fallbacks int64           // group-commit batches that failed as a whole
	cpu       cpuUsage
}

// pipelineConverge runs converge's side of Pipeline.
func pipelineConverge(ctx context.Context, s *scratch, o Options) (pipelineRun, error) {
	var out pipelineRun
	in, err := startWorking(ctx, s, o)
	if err != nil {
		return out, err
	}
	defer in.stop(ctx)

	// Each stream is a source of its own: it sends its next version when
	// its previous run has finished.
	n := o.Events
	load := newStreamLoad[uuid.UUID](o.Streams)
	stopSub := in.completions(load.finish)
	defer stopSub()

	lr, err := load.run(ctx, streamLoadParams[uuid.UUID]{
		Events: n, CPU: in.pool,
		Send: func(ctx context.Context, i int, v int64) (uuid.UUID, error) {
			// The accept's span, as the API makes it (a no-op unless tracing
			// is on: PipelineTracing).
			actx, span := telemetry.StartAccept(ctx, benchKind, resourceName(i), v)
			res, err := in.accept(actx, store.EventAcceptParams{
				EventSubmission: converge.EventSubmission{Kind: benchKind, Resource: resourceName(i), Version: v, Payload: json.RawMessage(`{}`)},
				// Every event here must run, and its stream's next version
				// comes only once it has: no debounce (which would hold each
				// one back and measure the delay, not the engine).
				MaxAttempts: config.DefaultMaxAttempts,
				TraceParent: telemetry.TraceParent(actx),
			})
			telemetry.EndAccept(span, res, err)
			if err != nil {
				return uuid.UUID{}, err
			}
			return res.Run.ID, nil
		},
	})
	if err != nil {
		return out, fmt.Errorf("pipeline: %w", err)
	}
	out.elapsed = lr.elapsed
	out.accepts = load.sends
	out.cpu = lr.cpu
	stopSub()
	in.stop(ctx)
	out.calls = in.tgt.calls.Load()
	out.fallbacks = in.svc.GroupCommit().Fallbacks()

	pool, err := s.pool(ctx, 2)
	if err != nil {
		return out, err
	}
	defer pool.Close()
	out.latencies, out.byStatus, err = runLatencies(ctx, pool)
	if err != nil {
		return out, err
	}
	if got := out.byStatus[string(converge.RunSucceeded)]; got != n {
		return out, fmt.Errorf("pipeline: %d of %d runs succeeded (%v)", got, n, out.byStatus)
	}
	return out, nil
}
