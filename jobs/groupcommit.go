package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/store"
	"github.com/converge-run/converge/telemetry"
)

// Group commit settings: how many batches of a kind of call may be in
// flight at once, how many calls one holds, how long one may take at most
// (also the cap on a batch's deadline), and how many calls of a failed
// batch are redone alone at once.
const (
	batchesInFlight = 1
	maxBatch        = 128
	batchTimeout    = 30 * time.Second
	aloneInFlight   = 8
)

// GroupCommit gathers EventAccept, AttemptBegin and AttemptFinish calls
// that arrive concurrently into batches, each committed in one transaction
// by the store's set-based functions (EventAcceptMany, AttemptBeginMany,
// AttemptFinishMany), as River's completer batches job completions beside
// its executor. A call that finds no batch of its kind in flight goes at
// once, alone, through the store's one-call function; calls that arrive
// meanwhile go together in the next batch. A batch holds at most one call
// per stream (a begin: per run; a second run of a stream in a batch is
// begun alone after it).
//
// If a batch fails as a whole (a payload PostgreSQL refuses, say), the
// failure is logged with its cause and counted
// (converge_batch_fallbacks_total), and each of its calls is redone alone,
// so that one bad request cannot fail another and its error is the one it
// would get alone.
//
// A batch runs until the latest deadline of its callers, at most
// batchTimeout; it is not cancelled with a caller, since it commits the
// others' calls too. A caller whose context ends while its call is still
// queued gets its context's error and its call is dropped; one whose call
// is already in a batch waits for the batch, whose transaction may commit
// the call (as a lone call's commit may).
type GroupCommit struct {
	store  *store.Store
	logger *slog.Logger

	accepts  *batcher[streamKey, store.EventAcceptParams, *converge.EventAcceptResult]
	begins   *batcher[uuid.UUID, store.AttemptBeginParams, *converge.AttemptTicket]
	finishes *batcher[streamKey, store.AttemptFinishParams, *store.AttemptFinishResult]

	metrics       *telemetry.Metrics
	fallbackCount atomic.Int64
	// batches counts the goroutines running batches; later the
	// AttemptFinishLater calls not yet recorded.
	batches sync.WaitGroup
	later   sync.WaitGroup
}

// NewGroupCommit returns the group commit of st's hot transactions.
// It counts its fallbacks in metrics (converge_batch_fallbacks_total) when
// metrics is not nil.
func NewGroupCommit(st *store.Store, logger *slog.Logger, metrics *telemetry.Metrics) *GroupCommit {
	if logger == nil {
		logger = slog.Default()
	}
	g := &GroupCommit{store: st, logger: logger.With("component", "group_commit"), metrics: metrics}
	g.accepts = &batcher[streamKey, store.EventAcceptParams, *converge.EventAcceptResult]{
		g: g, op: "accept",
		key: func(p store.EventAcceptParams) streamKey { return streamKey{p.Kind, p.Resource} },
		one: st.EventAccept,
		many: func(ctx context.Context, ps []store.EventAcceptParams) ([]*converge.EventAcceptResult, []error, error) {
			return st.EventAcceptMany(ctx, ps)
		},
	}
	// A begin's stream is known only once its run is read, so its batch
	// key is the run; AttemptBeginMany leaves a second run of a stream to
	// be begun alone.
	g.begins = &batcher[uuid.UUID, store.AttemptBeginParams, *converge.AttemptTicket]{
		g: g, op: "begin",
		key: func(p store.AttemptBeginParams) uuid.UUID { return p.RunID },
		one: func(ctx context.Context, p store.AttemptBeginParams) (*converge.AttemptTicket, error) {
			return st.AttemptBegin(ctx, p.RunID, p.JobID, p.LeaseTTL)
		},
		many: func(ctx context.Context, ps []store.AttemptBeginParams) ([]*converge.AttemptTicket, []error, error) {
			res, err := st.AttemptBeginMany(ctx, ps)
			return res, nil, err
		},
	}
	g.finishes = &batcher[streamKey, store.AttemptFinishParams, *store.AttemptFinishResult]{
		g: g, op: "finish",
		key: func(p store.AttemptFinishParams) streamKey { return streamKey{p.Run.Kind, p.Run.Resource} },
		one: st.AttemptFinish,
		many: func(ctx context.Context, ps []store.AttemptFinishParams) ([]*store.AttemptFinishResult, []error, error) {
			res, err := st.AttemptFinishMany(ctx, ps)
			return res, nil, err
		},
	}
	return g
}

// EventAccept is store.EventAccept, group-committed.
func (g *GroupCommit) EventAccept(ctx context.Context, p store.EventAcceptParams) (*converge.EventAcceptResult, error) {
	return g.accepts.do(ctx, p)
}

// AttemptBegin is store.AttemptBegin, group-committed.
func (g *GroupCommit) AttemptBegin(ctx context.Context, runID uuid.UUID, jobID int64, leaseTTL time.Duration) (*converge.AttemptTicket, error) {
	return g.begins.do(ctx, store.AttemptBeginParams{RunID: runID, JobID: jobID, LeaseTTL: leaseTTL})
}

// AttemptFinish is store.AttemptFinish, group-committed.
//
// The finish of a workflow step's run goes alone: its transaction may
// accept the workflow's next steps, locking streams outside the batch's
// lock order, so in a batch it could deadlock with another.
func (g *GroupCommit) AttemptFinish(ctx context.Context, p store.AttemptFinishParams) (*store.AttemptFinishResult, error) {
	if p.Run.WorkflowRunID != nil {
		return g.store.AttemptFinish(ctx, p)
	}
	return g.finishes.do(ctx, p)
}

// AttemptFinishLater records the outcome p as AttemptFinishRetry does
// (retried until until), in the background, and then calls then with the
// result. The worker uses it for a call that succeeded, so that its River
// slot is free for the next job while the outcome is group-committed, as
// River completes jobs in the background. The stream's lease stays held
// until the outcome is recorded, so nothing else of the stream starts
// meanwhile; if the process dies first, the attempt is rescued like one
// whose worker died during the call. Drain waits for these.
func (g *GroupCommit) AttemptFinishLater(p store.AttemptFinishParams, until time.Time, then func(*store.AttemptFinishResult, error)) {
	g.later.Go(func() {
		then(g.AttemptFinishRetry(context.Background(), p, until))
	})
}

// Retries of an outcome's write: the first wait, the longest, and the
// longest a single try may take.
const (
	outcomeRetryFirst = 50 * time.Millisecond
	outcomeRetryMax   = time.Second
	outcomeTryTimeout = batchTimeout
)

// AttemptFinishRetry is AttemptFinish, tried again with backoff (50ms
// doubling up to 1s) while it fails, until it succeeds, until passes or
// ctx ends (SPEC §15, outcome writes). A worker gives it the end of the
// attempt's lease window (rescue_after after the call ended): an outage
// shorter than that costs a delay, not a second call, since no rescue can
// take the run before the lease has expired and the write is retried
// often enough to come first once the database is back. Repeating the
// write is safe: it is fenced (store.AttemptFinish records an attempt
// only while it is open). A try whose commit succeeded but whose answer
// was lost (the connection broke during the commit) makes the next try
// find the attempt closed: the outcome recorded is read back, and if it is
// the one this call wrote, the result is reported as that write's, not as
// fenced.
func (g *GroupCommit) AttemptFinishRetry(ctx context.Context, p store.AttemptFinishParams, until time.Time) (*store.AttemptFinishResult, error) {
	wait := outcomeRetryFirst
	for try := 1; ; try++ {
		// The first try may always take its full time; later ones end
		// with the window.
		deadline := time.Now().Add(outcomeTryTimeout)
		if try > 1 {
			deadline = earlier(deadline, until)
		}
		tctx, cancel := context.WithDeadline(ctx, deadline)
		fin, err := g.AttemptFinish(tctx, p)
		cancel()
		if err == nil {
			if try > 1 {
				fin = g.recordedEarlier(ctx, p, fin)
				g.logger.Info("attempt outcome recorded after retries", "run_id", p.Run.ID, "attempt", p.Attempt, "tries", try)
			}
			return fin, nil
		}
		if try == 1 {
			g.logger.Warn("record attempt outcome failed; retrying until the lease's rescue_after has passed",
				"run_id", p.Run.ID, "attempt", p.Attempt, "error", err, "retry_until", until.UTC())
		}
		if ctx.Err() != nil || time.Now().Add(wait).After(until) {
			return nil, fmt.Errorf("record attempt outcome (%d tries): %w", try, err)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("record attempt outcome (%d tries): %w", try, err)
		case <-t.C:
		}
		wait = min(2*wait, outcomeRetryMax)
	}
}

// recordedEarlier returns fin, or, when fin says the attempt was closed
// already and the outcome recorded is the one p writes (an earlier try
// committed, and its answer was lost), the result of that write as the
// run now shows it.
func (g *GroupCommit) recordedEarlier(ctx context.Context, p store.AttemptFinishParams, fin *store.AttemptFinishResult) *store.AttemptFinishResult {
	if !fin.Fenced || fin.Outcome != "" {
		return fin
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	run, err := g.store.RunGet(rctx, p.Run.ID)
	if err != nil {
		return fin
	}
	var a *converge.Attempt
	for _, x := range run.AttemptHistory {
		if x.Number == p.Attempt {
			a = x
		}
	}
	if a == nil {
		if p.Interrupted {
			// Taken back by the earlier try.
			return &store.AttemptFinishResult{Status: run.Status, Requeue: true}
		}
		return fin
	}
	ours := p.Err == nil && a.Outcome == converge.OutcomeSucceeded ||
		p.Err != nil && a.Outcome != converge.OutcomeCancelled && a.Outcome != converge.OutcomeSucceeded &&
			a.Error != nil && a.Error.Message == p.Err.Message
	if !ours {
		return fin
	}
	res := &store.AttemptFinishResult{Status: run.Status, Outcome: a.Outcome}
	if run.Status == converge.RunRetrying && run.NextAttemptAt != nil {
		res.RetryIn = max(time.Until(*run.NextAttemptAt), 0)
	}
	return res
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// Drain waits until every AttemptFinishLater call has been recorded (or
// has failed), or ctx ends.
func (g *GroupCommit) Drain(ctx context.Context) error {
	if err := waitCtx(ctx, &g.later); err != nil {
		return fmt.Errorf("outcomes still being recorded: %w", err)
	}
	return nil
}

// Stop drains the AttemptFinishLater calls and waits for the batches in
// flight, or until ctx ends. Calls made after Stop still work.
func (g *GroupCommit) Stop(ctx context.Context) error {
	if err := g.Drain(ctx); err != nil {
		return err
	}
	if err := waitCtx(ctx, &g.batches); err != nil {
		return fmt.Errorf("batches still in flight: %w", err)
	}
	return nil
}

// Fallbacks is how many batches failed as a whole so far (their calls were
// redone alone).
func (g *GroupCommit) Fallbacks() int64 { return g.fallbackCount.Load() }

// waitCtx waits for wg, or until ctx ends.
func waitCtx(ctx context.Context, wg *sync.WaitGroup) error {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// streamKey is the batch key of a call of a stream: its kind and
// resource (a comparable struct: no string is built per call).
type streamKey struct{ kind, resource string }

// batcher runs calls of one kind that arrive concurrently together. A call
// that finds fewer than batchesInFlight batches in flight starts one at
// once, so a lone call waits for nothing; calls that arrive while batches
// are in flight queue up and go together in the next one. A batch holds at
// most one call per key (a stream): the others of that key stay queued, in
// order, for a later batch, so that a batch never has to order two calls
// of a stream itself.
type batcher[K comparable, Req any, Res comparable] struct {
	g   *GroupCommit
	op  string // the operation, in logs
	key func(Req) K
	// one runs a call alone; many runs calls together in one transaction
	// and returns a result or an error per call (errs may be nil), a zero
	// result with no error for a call to be run alone afterwards, or the
	// error that failed the transaction as a whole.
	one  func(ctx context.Context, req Req) (Res, error)
	many func(ctx context.Context, reqs []Req) ([]Res, []error, error)

	mu      sync.Mutex
	queue   []*batchCall[Req, Res]
	running int
	// grouped counts the committed batches of more than one call.
	grouped atomic.Int64
}

type batchCall[Req any, Res comparable] struct {
	ctx  context.Context
	req  Req
	res  Res
	err  error
	done chan struct{}
}

// do submits req and waits for its result.
func (b *batcher[K, Req, Res]) do(ctx context.Context, req Req) (Res, error) {
	var zero Res
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	c := &batchCall[Req, Res]{ctx: ctx, req: req, done: make(chan struct{})}
	b.mu.Lock()
	b.queue = append(b.queue, c)
	lead := b.running < batchesInFlight
	if lead {
		b.running++
		b.g.batches.Add(1)
	}
	b.mu.Unlock()
	if lead {
		go b.drain()
	}
	select {
	case <-c.done:
		return c.res, c.err
	case <-ctx.Done():
	}
	b.mu.Lock()
	queued := false
	for i, q := range b.queue {
		if q == c {
			b.queue = append(b.queue[:i], b.queue[i+1:]...)
			queued = true
			break
		}
	}
	b.mu.Unlock()
	if queued {
		return zero, ctx.Err()
	}
	// In a batch already: its transaction may commit the call.
	<-c.done
	return c.res, c.err
}

// drain runs batches until the queue is empty.
func (b *batcher[K, Req, Res]) drain() {
	defer b.g.batches.Done()
	for {
		b.mu.Lock()
		batch := b.take()
		if len(batch) == 0 {
			b.running--
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		b.run(batch)
		for _, c := range batch {
			close(c.done)
		}
	}
}

// take removes the next batch from the queue: up to maxBatch calls, the
// first of each key. The caller holds b.mu.
func (b *batcher[K, Req, Res]) take() []*batchCall[Req, Res] {
	if len(b.queue) == 0 {
		return nil
	}
	var batch []*batchCall[Req, Res]
	seen := make(map[K]bool, min(len(b.queue), maxBatch))
	rest := b.queue[:0]
	for _, c := range b.queue {
		k := b.key(c.req)
		if len(batch) < maxBatch && !seen[k] {
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

// batchContext is the context a batch of calls runs on: not cancelled with
// any caller, with the latest of their deadlines, at most batchTimeout from
// now.
func batchContext[Req any, Res comparable](calls []*batchCall[Req, Res]) (context.Context, context.CancelFunc) {
	deadline := time.Now().Add(batchTimeout)
	latest, all := time.Time{}, true
	for _, c := range calls {
		d, ok := c.ctx.Deadline()
		if !ok {
			all = false
			break
		}
		latest = later(latest, d)
	}
	if all && latest.Before(deadline) {
		deadline = latest
	}
	return context.WithDeadline(context.WithoutCancel(calls[0].ctx), deadline)
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// run answers the calls of batch: together in one transaction when there
// are more than one, then alone, each in a transaction of its own, every
// call that together left unanswered, or all of them if together failed.
func (b *batcher[K, Req, Res]) run(batch []*batchCall[Req, Res]) {
	var zero Res
	if len(batch) > 1 {
		ctx, cancel := batchContext(batch)
		reqs := make([]Req, len(batch))
		for i, c := range batch {
			reqs[i] = c.req
		}
		res, errs, err := b.many(ctx, reqs)
		cancel()
		switch {
		case err != nil:
			// One counter for every operation: the log line says which.
			b.g.metrics.BatchFellBack()
			b.g.fallbackCount.Add(1)
			b.g.logger.Warn("group commit: batch failed as a whole; its calls are redone one by one",
				"operation", b.op, "calls", len(batch), "error", err, "deadline_exceeded", errors.Is(err, context.DeadlineExceeded))
		default:
			b.grouped.Add(1)
			for i, c := range batch {
				c.res = res[i]
				if errs != nil {
					c.err = errs[i]
				}
			}
		}
	}
	alone := func(c *batchCall[Req, Res]) {
		ctx, cancel := batchContext([]*batchCall[Req, Res]{c})
		defer cancel()
		c.res, c.err = b.one(ctx, c.req)
	}
	if len(batch) == 1 {
		if c := batch[0]; c.res == zero && c.err == nil {
			alone(c)
		}
		return
	}
	// The calls are of distinct streams (or runs), so they do not wait
	// for one another's locks.
	sem := make(chan struct{}, aloneInFlight)
	var wg sync.WaitGroup
	for _, c := range batch {
		if c.res != zero || c.err != nil {
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			alone(c)
		})
	}
	wg.Wait()
}
