package invariant

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// AppliedWatch samples every stream's applied_version while converge runs,
// so that Check can tell whether it ever went down (G8), which the final
// state alone cannot show.
type AppliedWatch struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu        sync.Mutex
	last      map[string]int64
	probes    int
	decreases []decrease
}

type decrease struct {
	stream   string
	from, to int64
}

// WatchApplied starts sampling every interval until Stop (or ctx ends).
// Pass the watch to Check in Params.Applied.
func WatchApplied(ctx context.Context, pool *pgxpool.Pool, every time.Duration) *AppliedWatch {
	ctx, cancel := context.WithCancel(ctx)
	w := &AppliedWatch{cancel: cancel, done: make(chan struct{}), last: map[string]int64{}}
	go func() {
		defer close(w.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			w.sample(ctx, pool)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return w
}

func (w *AppliedWatch) sample(ctx context.Context, pool *pgxpool.Pool) {
	rows, err := pool.Query(ctx, `SELECT kind || ' ' || resource, applied_version FROM converge_streams WHERE applied_version IS NOT NULL`)
	if err != nil {
		return // the database may be restarting under a fault test
	}
	var stream string
	var applied int64
	w.mu.Lock()
	defer w.mu.Unlock()
	_, err = pgx.ForEachRow(rows, []any{&stream, &applied}, func() error {
		if prev, ok := w.last[stream]; ok && applied < prev {
			w.decreases = append(w.decreases, decrease{stream, prev, applied})
		}
		w.last[stream] = applied
		return nil
	})
	if err == nil {
		w.probes++
	}
}

// Stop ends the sampling. It may be called more than once; Check calls it.
func (w *AppliedWatch) Stop() {
	w.cancel()
	<-w.done
}

// findings stops the watch and returns how many samples were taken and
// the decreases seen.
func (w *AppliedWatch) findings() (probes int, decreases []decrease) {
	w.Stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.probes, w.decreases
}
