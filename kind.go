package converge

import (
	"slices"
	"time"
)

// KindPolicy is the policy of one configured kind of event: how many
// attempts a run gets, how long one may take, the delay between them, how
// many run at once and how long a superseding version waits. It is built
// once from the configuration (config.Config.KindPolicies) and handed as is
// to every part that applies it: the API (a kind is known when it has a
// policy; a new run gets its MaxAttempts and Debounce), the dashboard and
// the dead-letter redrives (a redriven run gets MaxAttempts) and the
// workers (Concurrency, Timeout, Backoff). Where the attempts go, the
// target, is not policy: jobs.Kind holds it beside the policy.
type KindPolicy struct {
	// Name is the kind's name (converge.ValidateKind holds).
	Name string
	// MaxAttempts is how many attempts a new run of the kind gets before it
	// fails and leaves a dead letter.
	MaxAttempts int
	// Backoff is the delay between a failed attempt and the next.
	Backoff Backoff
	// Concurrency is how many attempts of the kind one worker process runs
	// at once (its River queue's MaxWorkers).
	Concurrency int
	// Debounce holds back the first attempt of a new run until this long
	// after its acceptance (not a redrive's, nor a run released from
	// hold), but a burst at most twenty debounces from its first version;
	// zero is off.
	Debounce time.Duration
	// Timeout is how long one attempt may take, enforced by the target.
	Timeout time.Duration
	// QuarantineAfter quarantines a stream of the kind when this many of
	// its runs in a row ended failed (SPEC §11); zero is off.
	QuarantineAfter int
}

// KindPolicies are the configured kinds' policies by name: a kind is known
// exactly when it has an entry.
type KindPolicies map[string]KindPolicy

// Lookup returns the policy of the kind named name and whether the kind is
// configured.
func (p KindPolicies) Lookup(name string) (KindPolicy, bool) {
	k, ok := p[name]
	return k, ok
}

// Names returns the configured kinds' names, sorted.
func (p KindPolicies) Names() []string {
	names := make([]string, 0, len(p))
	for n := range p {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
