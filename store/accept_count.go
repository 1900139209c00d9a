package store

// Counting what accepting does inside the store's transactions, for
// converge_events_accepted_total{source="workflow"} and
// converge_runs_superseded_total. Every acceptance of a newer version
// goes through eventAcceptTx or eventAcceptMany, which note the runs they
// supersede in the transaction's acceptTally; workflowAdvance notes the
// steps it accepts when a need succeeds (in a finish's transaction, where
// no API request sees them). The transaction's function reports the
// tally to the observer after its commit (reportAccepts), so that a
// rolled-back transaction, a try that inTxRetry runs again and a
// group-commit batch that fell back to single calls count nothing; a
// delivery's savepoints roll the tally back with themselves.
//
// The API counts the events it accepts itself (source api, a source's
// name, and the root steps of the workflow runs it starts), from its
// answers: those are not noted here.

// AcceptObserver is told, after each commit, what the committed
// transaction's accepts did (ObserveAccepts). A nil func is not called.
type AcceptObserver struct {
	// StepAccepted is called for each workflow step of kind accepted
	// because its last need succeeded (in a finish's transaction).
	StepAccepted func(kind string)
	// RunsSuperseded is called with the n runs of kind the transaction
	// ended superseded by accepting a newer version of their stream,
	// whatever accepted it: an event of the API or of a source, a root
	// step of a workflow run's start, a step accepted by a finish.
	RunsSuperseded func(kind string, n int)
}

// ObserveAccepts sets o to be told what each committed transaction
// accepted and superseded (cmd passes telemetry's
// Metrics.WorkflowStepAccepted and Metrics.RunsSuperseded). Set it once,
// before the store is used.
func (s *Store) ObserveAccepts(o AcceptObserver) { s.acceptObserver = o }

// kindCount is n runs of kind.
type kindCount struct {
	kind string
	n    int
}

// acceptTally is what one transaction's accepts did so far: the kinds of
// the steps workflowAdvance accepted and the runs superseded, by kind.
// A nil *acceptTally notes nothing.
type acceptTally struct {
	steps      []string
	superseded []kindCount
}

// tallyMark is how far a tally was when a savepoint was set.
type tallyMark struct{ steps, superseded int }

// step notes a workflow step of kind accepted by its need's success.
func (t *acceptTally) step(kind string) {
	if t != nil {
		t.steps = append(t.steps, kind)
	}
}

// supersede notes n runs of kind ended superseded.
func (t *acceptTally) supersede(kind string, n int) {
	if t != nil && n > 0 {
		t.superseded = append(t.superseded, kindCount{kind, n})
	}
}

// mark is where the tally is now.
func (t *acceptTally) mark() tallyMark {
	if t == nil {
		return tallyMark{}
	}
	return tallyMark{len(t.steps), len(t.superseded)}
}

// rollback forgets what was noted since m (a savepoint rolled back).
func (t *acceptTally) rollback(m tallyMark) {
	if t != nil {
		t.steps, t.superseded = t.steps[:m.steps], t.superseded[:m.superseded]
	}
}

// reportAccepts hands the tally of a committed transaction to the
// observer.
func (s *Store) reportAccepts(t *acceptTally) {
	o := s.acceptObserver
	if o.StepAccepted != nil {
		for _, k := range t.steps {
			o.StepAccepted(k)
		}
	}
	if o.RunsSuperseded != nil {
		for _, c := range t.superseded {
			o.RunsSuperseded(c.kind, c.n)
		}
	}
}
