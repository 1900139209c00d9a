package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/converge-run/converge/target"
)

// naiveQueue is the River queue of the hand-written anchor.
const naiveQueue = "bench_naive"

// naiveArgs is the job of the hand-written anchor: the id of its event
// row, and the stream and version the target is told.
type naiveArgs struct {
	EventID  int64  `json:"event_id"`
	Resource string `json:"resource"`
	Version  int64  `json:"version"`
}

func (naiveArgs) Kind() string { return "bench_naive" }

// naiveWorker is what a user would write with River by hand for the same
// job: call the target, then write the outcome on the event row with an
// UPDATE in the transaction that completes the job (JobCompleteTx). It
// has none of converge's guarantees: no fencing, no supersession, no
// attempt history.
type naiveWorker struct {
	river.WorkerDefaults[naiveArgs]
	call target.Target
	pool *pgxpool.Pool
}

func (w *naiveWorker) Work(ctx context.Context, job *river.Job[naiveArgs]) error {
	res, err := w.call.Call(ctx, target.Request{Attempt: job.Attempt, Kind: "bench", Resource: job.Args.Resource,
		Version: job.Args.Version, Payload: json.RawMessage(`{}`)})
	if err != nil {
		return err
	}
	output := res.Output
	if len(output) == 0 {
		output = json.RawMessage(`null`)
	}
	tx, err := w.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, `UPDATE bench_naive_events SET status = 'succeeded', output = $2::jsonb, finished_at = now() WHERE id = $1`,
		job.Args.EventID, string(output)); err != nil {
		return err
	}
	if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// naiveRun is the hand-written anchor of Pipeline, driven like converge's
// side: o.Streams sources, each inserting its next version (the event row
// and its River job in one transaction) once its previous job completed,
// o.Events in all, against the same in-process target. It returns the
// time from the first insert to the last completion, each event's latency
// (insert to completion), and the CPU used.
func naiveRun(ctx context.Context, s *scratch, o Options, call target.Target) (time.Duration, []time.Duration, cpuUsage, error) {
	var cpu cpuUsage
	pool, err := s.pool(ctx, o.PoolSize)
	if err != nil {
		return 0, nil, cpu, err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS bench_naive_events (
		id bigserial PRIMARY KEY, resource text NOT NULL, version bigint NOT NULL,
		status text NOT NULL DEFAULT 'queued', output jsonb, created_at timestamptz NOT NULL DEFAULT now(), finished_at timestamptz,
		UNIQUE (resource, version))`); err != nil {
		return 0, nil, cpu, fmt.Errorf("naive anchor table: %w", err)
	}
	worker := &naiveWorker{call: call, pool: pool}
	workers := river.NewWorkers()
	river.AddWorker(workers, worker)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Logger:            o.Logger,
		Queues:            map[string]river.QueueConfig{naiveQueue: {MaxWorkers: o.Workers}},
		Workers:           workers,
		FetchCooldown:     o.FetchCooldown,
		FetchPollInterval: o.FetchPollInterval,
	})
	if err != nil {
		return 0, nil, cpu, fmt.Errorf("naive anchor client: %w", err)
	}
	events, cancelSub := client.SubscribeConfig(&river.SubscribeConfig{Kinds: []river.EventKind{river.EventKindJobCompleted}, ChanSize: o.Events + 1000})
	defer cancelSub()
	if err := client.Start(ctx); err != nil {
		return 0, nil, cpu, fmt.Errorf("start naive anchor client: %w", err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = client.Stop(sctx)
	}()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	n := o.Events
	// A job's insert and its completion meet in load.
	load := newStreamLoad[int64](o.Streams)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-events:
				if !ok {
					return
				}
				if ev.Job.Queue != naiveQueue {
					continue
				}
				load.finish(ev.Job.ID)
			}
		}
	}()

	lr, err := load.run(ctx, streamLoadParams[int64]{
		Events: n, CPU: pool,
		Send: func(ctx context.Context, i int, v int64) (int64, error) {
			return naiveInsert(ctx, pool, client, resourceName(i), v)
		},
	})
	if err != nil {
		return 0, nil, cpu, fmt.Errorf("naive anchor: %w", err)
	}
	cpu = lr.cpu
	var done int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM bench_naive_events WHERE status = 'succeeded'`).Scan(&done); err != nil {
		return 0, nil, cpu, err
	}
	if done != n {
		return 0, nil, cpu, fmt.Errorf("naive anchor: %d of %d events succeeded", done, n)
	}
	return lr.elapsed, load.roundTrips(), cpu, nil
}

// naiveInsert inserts an event row and its River job in one transaction
// and returns the job's id.
func naiveInsert(ctx context.Context, pool *pgxpool.Pool, client *river.Client[pgx.Tx], resource string, version int64) (int64, error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var id int64
	if err := tx.QueryRow(ctx, `INSERT INTO bench_naive_events (resource, version) VALUES ($1, $2) RETURNING id`, resource, version).Scan(&id); err != nil {
		return 0, err
	}
	res, err := client.InsertTx(ctx, tx, naiveArgs{EventID: id, Resource: resource, Version: version}, &river.InsertOpts{Queue: naiveQueue})
	if err != nil {
		return 0, err
	}
	return res.Job.ID, tx.Commit(ctx)
}
