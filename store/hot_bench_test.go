package store_test

import (
	"encoding/json"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/store"
	"github.com/converge-run/converge/test/pgtest"
)

// BenchmarkHotBatch is one event's way through the group-commit batches,
// 50 events a batch as in bench pipeline's larger batches: EventAcceptMany,
// AttemptBeginMany, AttemptFinishMany (a success), each event of a stream of
// its own. Its B/op and allocs/op are the process's allocations for 50
// events, the database's round trips included; they do not depend on the
// machine's load as bench pipeline's per-event figures do (docs/benchmarks.md,
// "Round 7"). cpu-µs/event is the process's CPU time (user and system, GC
// included) per event, the lookup of the jobs' ids left out.
func BenchmarkHotBatch(b *testing.B) {
	const n = 50
	ctx := b.Context()
	pool := pgtest.OpenPool(b, pgtest.NewDatabase(b), 4)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		b.Fatalf("river client: %v", err)
	}
	st := store.New(pool, client)
	payload := json.RawMessage(`{"image":"registry.example/app:1.4.2","replicas":3}`)
	b.ReportAllocs()
	var cpu time.Duration
	start := processCPU(b)
	iter := 0
	for b.Loop() {
		iter++
		accepts := make([]store.EventAcceptParams, n)
		for i := range accepts {
			accepts[i] = store.EventAcceptParams{
				EventSubmission: converge.EventSubmission{Kind: "deploy", Resource: fmt.Sprintf("r-%d-%d", iter, i), Version: 1, Payload: payload},
				MaxAttempts:     3,
			}
		}
		acc, errs, err := st.EventAcceptMany(ctx, accepts)
		if err != nil {
			b.Fatalf("accept: %v", err)
		}
		ids := make([]uuid.UUID, n)
		for i, r := range acc {
			if errs[i] != nil {
				b.Fatalf("accept %d: %v", i, errs[i])
			}
			ids[i] = r.Run.ID
		}

		b.StopTimer()
		cpu += processCPU(b) - start
		jobs := map[uuid.UUID]int64{}
		rows, err := pool.Query(ctx, `SELECT id, job_id FROM converge_runs WHERE id = ANY($1)`, ids)
		if err != nil {
			b.Fatal(err)
		}
		for rows.Next() {
			var id uuid.UUID
			var job int64
			if err := rows.Scan(&id, &job); err != nil {
				b.Fatal(err)
			}
			jobs[id] = job
		}
		if err := rows.Err(); err != nil {
			b.Fatal(err)
		}
		start = processCPU(b)
		b.StartTimer()

		begins := make([]store.AttemptBeginParams, n)
		for i, id := range ids {
			begins[i] = store.AttemptBeginParams{RunID: id, JobID: jobs[id], LeaseTTL: time.Minute}
		}
		tickets, err := st.AttemptBeginMany(ctx, begins)
		if err != nil {
			b.Fatalf("begin: %v", err)
		}
		finishes := make([]store.AttemptFinishParams, n)
		for i, tk := range tickets {
			if tk == nil || tk.Decision != converge.DecisionCall {
				b.Fatalf("begin %d: %+v", i, tk)
			}
			finishes[i] = store.AttemptFinishParams{Run: tk.Run, JobID: jobs[ids[i]], Attempt: tk.Attempt, Started: time.Now(),
				Output: json.RawMessage(`{"ok":true}`)}
		}
		res, err := st.AttemptFinishMany(ctx, finishes)
		if err != nil {
			b.Fatalf("finish: %v", err)
		}
		for i, r := range res {
			if r.Status != converge.RunSucceeded {
				b.Fatalf("finish %d: %s", i, r.Status)
			}
		}
	}
	cpu += processCPU(b) - start
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N*n), "cpu-µs/event")
}

// processCPU is the CPU time the process has used so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
