package jobs

import (
	"context"

	"github.com/converge-run/converge/store"
)

// GroupedBatches reports how many batches of more than one call the group
// commit committed so far: accepts, attempt begins, attempt finishes.
func (g *GroupCommit) GroupedBatches() (accepts, begins, finishes int64) {
	return g.accepts.grouped.Load(), g.begins.grouped.Load(), g.finishes.grouped.Load()
}

// RecordedEarlier is recordedEarlier, for tests.
func (g *GroupCommit) RecordedEarlier(ctx context.Context, p store.AttemptFinishParams, fin *store.AttemptFinishResult) *store.AttemptFinishResult {
	return g.recordedEarlier(ctx, p, fin)
}
