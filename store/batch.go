package store

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// batcher runs requests that arrive concurrently together, a batch in one
// transaction (group commit), as River batches its job completions. A
// request that finds fewer than maxRunning batches in flight starts one at
// once, so a lone request waits for nothing; requests that arrive while
// batches are in flight queue up and go together in the next one. A batch
// holds at most one request per key (a stream): the others of that key stay
// queued, in order, for a later batch, so that a batch never has to order
// two requests of a stream itself.
type batcher[Req, Res any] struct {
	maxRunning int
	maxBatch   int
	key        func(Req) string
	// run executes a batch and returns a result or an error per request,
	// in order.
	run func(reqs []Req) ([]Res, []error)

	mu      sync.Mutex
	queue   []*batchCall[Req, Res]
	running int
	// grouped counts the batches of more than one request, for tests.
	grouped atomic.Int64
}

type batchCall[Req, Res any] struct {
	req  Req
	res  Res
	err  error
	done chan struct{}
}

// do submits req and waits for its result. It waits even when the caller's
// context ends: the request may be in a batch that is being committed, and
// the batch's own deadline bounds the wait.
func (b *batcher[Req, Res]) do(req Req) (Res, error) {
	c := &batchCall[Req, Res]{req: req, done: make(chan struct{})}
	b.mu.Lock()
	b.queue = append(b.queue, c)
	lead := b.running < b.maxRunning
	if lead {
		b.running++
	}
	b.mu.Unlock()
	if lead {
		go b.drain()
	}
	<-c.done
	return c.res, c.err
}

// drain runs batches until the queue is empty.
func (b *batcher[Req, Res]) drain() {
	for {
		b.mu.Lock()
		batch := b.take()
		if len(batch) == 0 {
			b.running--
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		if len(batch) > 1 {
			b.grouped.Add(1)
		}
		reqs := make([]Req, len(batch))
		for i, c := range batch {
			reqs[i] = c.req
		}
		res, errs := b.run(reqs)
		for i, c := range batch {
			c.res, c.err = res[i], errs[i]
			close(c.done)
		}
	}
}

// take removes the next batch from the queue: up to maxBatch requests, the
// first of each key. The caller holds b.mu.
func (b *batcher[Req, Res]) take() []*batchCall[Req, Res] {
	if len(b.queue) == 0 {
		return nil
	}
	var batch []*batchCall[Req, Res]
	seen := make(map[string]bool, min(len(b.queue), b.maxBatch))
	rest := b.queue[:0]
	for _, c := range b.queue {
		k := b.key(c.req)
		if len(batch) < b.maxBatch && !seen[k] {
			seen[k] = true
			batch = append(batch, c)
			continue
		}
		rest = append(rest, c)
	}
	clear(b.queue[len(rest):])
	b.queue = rest
	return batch
}

// uuids is ids as a query argument pgx encodes directly (a uuid.UUID is
// encoded through its text form).
func uuids(ids []uuid.UUID) [][16]byte {
	out := make([][16]byte, len(ids))
	for i, id := range ids {
		out[i] = id
	}
	return out
}

// eachAlone calls fn(i) for i in 0..n-1 where skip(i) is false, up to
// eight at a time: the requests of a batch that failed as a whole, each
// in a transaction of its own. They are of distinct streams (or runs), so
// they do not wait for one another's locks.
func eachAlone(n int, skip func(int) bool, fn func(int)) {
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i := range n {
		if skip(i) {
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			fn(i)
		})
	}
	wg.Wait()
}

// batchRun runs a batch of requests: together in one transaction when
// there are more than one (from is this process's clock just before its
// BEGIN), then alone, each in a transaction of its own, every request that
// together left unanswered, or all of them if together failed.
func batchRun[Req any, Res comparable](s *Store, reqs []Req,
	together func(ctx context.Context, tx pgx.Tx, from time.Time, res []Res, errs []error) error,
	alone func(ctx context.Context, req Req) (Res, error),
) ([]Res, []error) {
	ctx, cancel := context.WithTimeout(context.Background(), batchTimeout)
	defer cancel()
	res := make([]Res, len(reqs))
	errs := make([]error, len(reqs))
	if len(reqs) > 1 {
		var from time.Time
		err := s.inTxFrom(ctx, &from, func(tx pgx.Tx) error { return together(ctx, tx, from, res, errs) })
		if err != nil {
			clear(res)
			clear(errs)
		}
	}
	var zero Res
	eachAlone(len(reqs), func(i int) bool { return res[i] != zero || errs[i] != nil }, func(i int) {
		res[i], errs[i] = alone(ctx, reqs[i])
	})
	return res, errs
}
