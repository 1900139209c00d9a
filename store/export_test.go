package store

// GroupedBatches reports how many batches of more than one request the
// store ran so far: accepts, attempt begins, attempt finishes.
func (s *Store) GroupedBatches() (accepts, begins, finishes int64) {
	return s.accepts.grouped.Load(), s.begins.grouped.Load(), s.finishes.grouped.Load()
}
