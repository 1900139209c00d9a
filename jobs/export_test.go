package jobs

// GroupedBatches reports how many batches of more than one call the group
// commit committed so far: accepts, attempt begins, attempt finishes.
func (g *GroupCommit) GroupedBatches() (accepts, begins, finishes int64) {
	return g.accepts.grouped.Load(), g.begins.grouped.Load(), g.finishes.grouped.Load()
}
