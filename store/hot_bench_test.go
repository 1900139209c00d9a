package store_test

import (
	"encoding/json"
	"fmt"
	"runtime"
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
//
// Its anchor, measured in the same loop with the timer stopped, is River's
// own insert of the same 50 events as jobs (Client.InsertMany, one
// statement: the part of bare River that converge's accept also does). It
// reports the anchor's river-allocs/event and river-cpu-µs/event beside
// converge's allocs/event and cpu-µs/event, and alloc-ratio and cpu-ratio,
// the anchor's over converge's, as bench pipeline's ratios: higher is
// better, and 1 would be converge's whole way through the batches for the
// cost of River's insert alone.
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
	var conv, anchor hotMeter
	iter := 0
	for b.Loop() {
		iter++
		b.StopTimer()
		anchorJobs := make([]river.InsertManyParams, n)
		for i := range anchorJobs {
			anchorJobs[i] = river.InsertManyParams{Args: hotAnchorArgs{Resource: fmt.Sprintf("a-%d-%d", iter, i), Version: 1, Payload: payload}}
		}
		anchor.start(b)
		if _, err := client.InsertMany(ctx, anchorJobs); err != nil {
			b.Fatalf("anchor insert: %v", err)
		}
		anchor.stop(b)
		conv.start(b)
		b.StartTimer()

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
		conv.stop(b)
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
		conv.start(b)
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
		b.StopTimer()
		conv.stop(b)
		b.StartTimer()
	}
	events := float64(b.N * n)
	b.ReportMetric(float64(conv.cpu.Microseconds())/events, "cpu-µs/event")
	b.ReportMetric(float64(conv.allocs)/events, "allocs/event")
	b.ReportMetric(float64(anchor.cpu.Microseconds())/events, "river-cpu-µs/event")
	b.ReportMetric(float64(anchor.allocs)/events, "river-allocs/event")
	if conv.cpu > 0 && conv.allocs > 0 {
		b.ReportMetric(float64(anchor.cpu)/float64(conv.cpu), "cpu-ratio")
		b.ReportMetric(float64(anchor.allocs)/float64(conv.allocs), "alloc-ratio")
	}
}

// hotAnchorArgs is the River job of BenchmarkHotBatch's anchor: what a
// hand-written River job for the event would carry.
type hotAnchorArgs struct {
	Resource string          `json:"resource"`
	Version  int64           `json:"version"`
	Payload  json.RawMessage `json:"payload"`
}

func (hotAnchorArgs) Kind() string { return "hot_anchor" }

// hotMeter sums the process's CPU time and heap allocations over the
// stretches between its start and stop calls.
type hotMeter struct {
	cpu           time.Duration
	allocs        uint64
	cpu0, allocs0 uint64
	ms            runtime.MemStats
}

func (m *hotMeter) start(b *testing.B) {
	runtime.ReadMemStats(&m.ms)
	m.allocs0 = m.ms.Mallocs
	m.cpu0 = uint64(processCPU(b))
}

func (m *hotMeter) stop(b *testing.B) {
	m.cpu += time.Duration(uint64(processCPU(b)) - m.cpu0)
	runtime.ReadMemStats(&m.ms)
	m.allocs += m.ms.Mallocs - m.allocs0
}

// processCPU is the CPU time the process has used so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
