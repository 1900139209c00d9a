package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/config"
	"github.com/converge-run/converge/store"
)

// Workflow defaults.
const (
	DefaultWorkflowRuns    = 2000
	DefaultWorkflowStreams = 100
	// WorkflowGoal is the ratio of workflow runs/s to pipeline events/s
	// the workflow benchmark aims at. A run of the 3-step chain is three
	// events run one after the other, so 1/3 would be par with the
	// pipeline; the goal leaves room for the workflow bookkeeping (the
	// run's row, its steps, the advance in each step's finish).
	WorkflowGoal = 0.25
)

// workflowKinds are the kinds of the chain's steps a, b and c.
var workflowKinds = []string{"bench_a", "bench_b", "bench_c"}

// Workflow measures workflow runs of a 3-step chain (a → b → c, each step a
// kind of its own, against the in-process target Pipeline uses): o.Events
// workflow runs (default 2000) over o.Streams resources (default 100) are
// started through store.WorkflowRunStart and walked by the real workers
// (each step accepted in the transaction of its need's success). Each
// resource is a source of its own that starts its next version when its
// previous workflow run has finished, so that no run is superseded. The
// rate is workflow runs finished per second from the first start to the
// last finish; the latency is a workflow run's created_at to finished_at.
//
// The anchor is Pipeline's converge side (events/s, every event a run of
// one step) with the same number of events and streams, measured first in
// the same database: ratio = workflow runs/s ÷ pipeline events/s, 1/3 being
// par for three steps.
func Workflow(ctx context.Context, o Options) (*Result, error) {
	o = o.withDefaults()
	if o.Events <= 0 {
		o.Events = DefaultWorkflowRuns
	}
	if o.Streams <= 0 {
		o.Streams = DefaultWorkflowStreams
	}
	o.Streams = min(o.Streams, o.Events)
	return withScratch(ctx, o, func(s *scratch) (*Result, error) {
		o.logf("anchor: bench pipeline, %d events over %d streams", o.Events, o.Streams)
		anchor, err := pipelineConverge(ctx, s, o)
		if err != nil {
			return nil, fmt.Errorf("anchor: %w", err)
		}
		anchorRate := perSecond(o.Events, anchor.elapsed)
		o.logf("anchor: %.0f events/s", anchorRate)

		o.logf("converge: %d workflow runs of a → b → c over %d resources", o.Events, o.Streams)
		var conv workflowRun
		err = o.profile(func() error {
			var err error
			conv, err = workflowConverge(ctx, s, o)
			return err
		})
		if err != nil {
			return nil, err
		}
		rate := perSecond(o.Events, conv.elapsed)
		o.logf("converge: %.1f workflow runs/s", rate)

		r := &Result{
			Benchmark: "workflow", RateUnit: "per second",
			Rate:       rate,
			AnchorRate: anchorRate,
			Anchor:     "events of bench pipeline's converge side, same events, streams, pool and workers, same database; converge: workflow runs",
			Latency:    "workflow run start to finish (created_at to finished_at)",
			Goal:       fmt.Sprintf("ratio >= %.2f (1/3 is par: a run is 3 events in sequence)", WorkflowGoal),
		}
		r.Ratio = ratio(r.Rate, r.AnchorRate)
		r.GoalMet = r.Ratio >= WorkflowGoal
		r.P50, r.P95, r.P99 = percentiles(conv.latencies)
		r.add("workflow_runs", "workflow runs", o.Events)
		r.add("steps", "steps per run", len(workflowKinds))
		r.add("streams", "resources", o.Streams)
		r.addRiverSettings(o, "workers (River MaxWorkers per kind)")
		r.add("elapsed_ms", "converge elapsed", conv.elapsed)
		r.add("anchor_elapsed_ms", "anchor elapsed", anchor.elapsed)
		r.add("step_events_per_s", "step events/s", round(perSecond(o.Events*len(workflowKinds), conv.elapsed), 1))
		r.add("anchor_p50_ms", "anchor latency p50 (one event)", percentile(anchor.latencies, 50))
		r.add("target_calls", "target calls", conv.calls)
		r.add("start_p50_ms", "WorkflowRunStart p50", percentile(conv.starts, 50))
		r.add("start_p99_ms", "WorkflowRunStart p99", percentile(conv.starts, 99))
		addCPU(r, conv.cpu, anchor.cpu, o.Events*len(workflowKinds), o.Events)
		return r, nil
	})
}

type workflowRun struct {
	elapsed   time.Duration
	latencies []time.Duration
	calls     int64
	starts    []time.Duration // WorkflowRunStart's latency
	cpu       cpuUsage
}

// workflowConverge runs converge's side of Workflow.
func workflowConverge(ctx context.Context, s *scratch, o Options) (workflowRun, error) {
	var out workflowRun
	in, err := startWorking(ctx, s, o, workflowKinds...)
	if err != nil {
		return out, err
	}
	defer in.stop(ctx)
	def, err := converge.NewWorkflow("bench", map[string]*converge.WorkflowStep{
		"a": {Kind: workflowKinds[0]},
		"b": {Kind: workflowKinds[1], Needs: []string{"a"}},
		"c": {Kind: workflowKinds[2], Needs: []string{"b"}},
	})
	if err != nil {
		return out, err
	}
	last := workflowKinds[len(workflowKinds)-1]
	policies := map[string]store.StepPolicy{}
	for _, k := range workflowKinds {
		policies[k] = store.StepPolicy{MaxAttempts: config.DefaultMaxAttempts}
	}

	// A workflow run is over when its last step's run has finished: the
	// start of a workflow run and that completion meet in load.
	n := o.Events
	load := newStreamLoad[uuid.UUID](o.Streams)
	stopSub := in.finishedRuns(func(run *converge.Run) {
		if run.Kind != last || run.WorkflowRunID == nil {
			return
		}
		load.finish(*run.WorkflowRunID)
	})
	defer stopSub()

	lr, err := load.run(ctx, streamLoadParams[uuid.UUID]{
		Events: n, CPU: in.pool,
		Send: func(ctx context.Context, i int, v int64) (uuid.UUID, error) {
			res, err := in.store.WorkflowRunStart(ctx, store.WorkflowRunStartParams{
				WorkflowRunStart: converge.WorkflowRunStart{Workflow: def.Name, Resource: resourceName(i), Version: v, Payload: json.RawMessage(`{}`)},
				Definition:       def, Policies: policies,
			})
			if err != nil {
				return uuid.UUID{}, err
			}
			return res.WorkflowRun.ID, nil
		},
	})
	if err != nil {
		return out, fmt.Errorf("workflow: %w", err)
	}
	out.elapsed = lr.elapsed
	out.starts = load.sends
	out.cpu = lr.cpu
	stopSub()
	in.stop(ctx)
	out.calls = in.tgt.calls.Load()

	pool, err := s.pool(ctx, 2)
	if err != nil {
		return out, err
	}
	defer pool.Close()
	rows, err := pool.Query(ctx, `SELECT (extract(epoch FROM finished_at - created_at) * 1000000)::bigint
		FROM converge_workflow_runs WHERE status = 'succeeded' AND finished_at IS NOT NULL`)
	if err != nil {
		return out, fmt.Errorf("read workflow latencies: %w", err)
	}
	us, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return out, fmt.Errorf("read workflow latencies: %w", err)
	}
	for _, u := range us {
		out.latencies = append(out.latencies, time.Duration(u)*time.Microsecond)
	}
	if len(us) != n {
		var byStatus string
		_ = pool.QueryRow(ctx, `SELECT coalesce(string_agg(status || '=' || c, ' '), '') FROM
			(SELECT status, count(*) c FROM converge_workflow_runs GROUP BY status) s`).Scan(&byStatus)
		return out, fmt.Errorf("workflow: %d of %d workflow runs succeeded (%s)", len(us), n, byStatus)
	}
	return out, nil
}
