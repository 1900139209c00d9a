package bench

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// streamLoad is the closed-loop load of the pipeline-shaped benchmarks
// (Pipeline, Workflow, History and the naive anchor): k streams, each a
// source of its own that sends its next version only once its previous
// one has finished, so that nothing is superseded while up to k sends are
// in flight. A send and the finish it waits for meet here, in either
// order: finish may be told of an id before its send has returned it.
// ID is what a send returns and a finish names (a run, a workflow run, a
// River job).
type streamLoad[ID comparable] struct {
	mu       sync.Mutex
	finished []chan struct{}   // finished[i] hears of stream i's sends
	stream   map[ID]int        // sent, not yet finished: by stream
	early    map[ID]bool       // finished before its send was recorded
	sends    []time.Duration   // each send's own latency, in the order they returned
	rounds   [][]time.Duration // by stream: each send to its finish
}

// newStreamLoad makes the load of k streams.
func newStreamLoad[ID comparable](k int) *streamLoad[ID] {
	l := &streamLoad[ID]{
		finished: make([]chan struct{}, k),
		stream:   map[ID]int{},
		early:    map[ID]bool{},
		rounds:   make([][]time.Duration, k),
	}
	for i := range l.finished {
		l.finished[i] = make(chan struct{}, 1)
	}
	return l
}

// finish records that id has finished: it wakes the stream that sent it,
// or, when its send is not recorded yet, keeps it for that send.
func (l *streamLoad[ID]) finish(id ID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if i, ok := l.stream[id]; ok {
		delete(l.stream, id)
		l.finished[i] <- struct{}{}
		return
	}
	l.early[id] = true
}

// streamLoadParams say what streamLoad.run sends.
type streamLoadParams[ID comparable] struct {
	// Events is how many versions to send in all: stream i gets
	// Events/k, the first Events%k one more. Zero: each stream sends
	// until Stop is closed, which is checked before every send.
	Events int
	Stop   <-chan struct{}
	// CPU, when set, is the pool whose database sessions' CPU time
	// (with this process's) run measures from the first send to the
	// last stream's end.
	CPU *pgxpool.Pool
	// Send sends version v (1, 2, …) of stream i and returns the id
	// whose finish the stream waits for before its next send.
	Send func(ctx context.Context, i int, v int64) (ID, error)
}

// streamLoadRun is what streamLoad.run measured.
type streamLoadRun struct {
	elapsed time.Duration // from the first send to the last stream's end
	cpu     cpuUsage      // with streamLoadParams.CPU, when no send failed
}

// run sends p.Events versions over the streams, each stream waiting for
// the finish of its last send before its next. The first error of a send
// cancels the rest and is returned.
func (l *streamLoad[ID]) run(ctx context.Context, p streamLoadParams[ID]) (streamLoadRun, error) {
	var out streamLoadRun
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	n, stop, send := p.Events, p.Stop, p.Send
	k := len(l.finished)
	var meter *cpuMeter
	if p.CPU != nil {
		meter = startCPU(ctx, p.CPU)
	}
	var wg sync.WaitGroup
	start := time.Now()
	for i := range k {
		versions := -1 // until stop
		if n > 0 {
			versions = n / k
			if i < n%k {
				versions++
			}
		}
		wg.Go(func() {
			for v := int64(1); versions < 0 || v <= int64(versions); v++ {
				if stop != nil {
					select {
					case <-stop:
						return
					default:
					}
				}
				t0 := time.Now()
				id, err := send(ctx, i, v)
				if err != nil {
					cancel(err)
					return
				}
				l.mu.Lock()
				l.sends = append(l.sends, time.Since(t0))
				if l.early[id] {
					delete(l.early, id)
					l.finished[i] <- struct{}{}
				} else {
					l.stream[id] = i
				}
				l.mu.Unlock()
				select {
				case <-l.finished[i]:
					l.rounds[i] = append(l.rounds[i], time.Since(t0))
				case <-ctx.Done():
					return
				}
			}
		})
	}
	wg.Wait()
	out.elapsed = time.Since(start)
	if err := context.Cause(ctx); err != nil {
		return out, err
	}
	if meter != nil {
		out.cpu = meter.stop(ctx)
	}
	return out, nil
}

// roundTrips is each finished send's latency from the send to its finish.
func (l *streamLoad[ID]) roundTrips() []time.Duration {
	var out []time.Duration
	for _, r := range l.rounds {
		out = append(out, r...)
	}
	return out
}
