package dlq_test

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/target"
	"github.com/converge-run/converge/test/testkit"
)

// TestRedriveTwiceAtOnce: two redrives of one dead letter at the same time
// (single or bulk) start exactly one new run; the other is told not-open.
func TestRedriveTwiceAtOnce(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	const n = 20
	for i := range n {
		d := s.deadLetter(t, "build", fmt.Sprintf("app/twice-%d", i), 1, converge.ClassPermanent, "boom")
		var wg sync.WaitGroup
		start := make(chan struct{})
		results := make([]string, 2)
		for j := range 2 {
			wg.Go(func() {
				<-start
				// Every other round, one of the two is a bulk redrive.
				if i%2 == 1 && j == 1 {
					res := s.bulk(t, "redrive", map[string]any{"ids": []string{d.ID.String()}})
					switch {
					case len(res.Done) == 1:
						results[j] = "202"
					case len(res.Skipped) == 1:
						results[j] = "409 " + res.Skipped[0].Reason
					}
					return
				}
				r := s.do(t, s.operator, http.MethodPost, "/v1/dead-letters/"+d.ID.String()+"/redrive", nil)
				results[j] = fmt.Sprint(r.status)
				if r.status == http.StatusConflict {
					var p problem
					r.decode(t, &p)
					results[j] += " " + p.Type[len("urn:converge:problem:"):]
				}
			})
		}
		close(start)
		wg.Wait()
		ok := results[0] == "202" && results[1] == "409 not-open" || results[1] == "202" && results[0] == "409 not-open"
		if !ok {
			t.Fatalf("round %d: answers %q, want one 202 and one 409 not-open", i, results)
		}
		if runs := s.count(t, `SELECT count(*) FROM converge_runs WHERE event_id = $1`, d.EventID); runs != 2 {
			t.Fatalf("round %d: %d runs, want 2", i, runs)
		}
		// One job for the redrive's run; the failed run's job was deleted
		// when it failed (store.endedJobsDeleteStmt).
		if jobs := s.count(t, `SELECT count(*) FROM river_job WHERE args->>'run_id' IN (SELECT id::text FROM converge_runs WHERE event_id = $1)`, d.EventID); jobs != 1 {
			t.Fatalf("round %d: %d jobs, want 1 (the redrive's)", i, jobs)
		}
		if jobs := s.count(t, `SELECT count(*) FROM river_job WHERE args->>'run_id' IN (SELECT id::text FROM converge_runs WHERE event_id = $1 AND number = 2)`, d.EventID); jobs != 1 {
			t.Fatalf("round %d: the redrive's run has %d jobs, want 1", i, jobs)
		}
	}
	if n := s.count(t, `SELECT count(*) FROM converge_audit WHERE action = 'dead_letter.redrive'`); n != 20 {
		t.Fatalf("%d audit entries, want 20", n)
	}
}

// TestRedriveRacesNewerEvent: a redrive of version V racing the acceptance
// of V+1 never lets V reach the target after V+1 (G2), across many streams
// at once and several rounds, with real workers.
func TestRedriveRacesNewerEvent(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{workers: true})
	const streams, rounds = 30, 3
	var mu sync.Mutex
	failed := map[string]bool{}
	// Odd versions fail permanently on their first call (and so are
	// dead-lettered) and succeed afterwards; every call takes a little time
	// so that attempts overlap with the races.
	s.target.set(func(req target.Request) error {
		time.Sleep(time.Duration(rand.IntN(8)) * time.Millisecond) // a slow target is the point, not a wait
		key := fmt.Sprint(req.Resource, "@", req.Version)
		mu.Lock()
		defer mu.Unlock()
		if req.Version%2 == 1 && !failed[key] {
			failed[key] = true
			return permanent("not yet")
		}
		return nil
	})
	outcomes := map[string]int{}
	for round := range rounds {
		v := int64(2*round + 1)
		for i := range streams {
			r := s.do(t, "", http.MethodPost, "/v1/events", fmt.Sprintf(`{"kind": "build", "resource": "app/race-%d", "version": %d}`, i, v))
			want(t, r, http.StatusAccepted)
		}
		testkit.WaitFor(t, 60*time.Second, "the dead letters of the round", func() bool {
			return s.count(t, `SELECT count(*) FROM converge_dead_letters WHERE version = $1 AND status = 'open'`, v) == streams
		})
		p := s.list(t, fmt.Sprintf("limit=500&resource=app/race-&since=%s", time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)))
		var wg sync.WaitGroup
		start := make(chan struct{})
		for _, d := range p.Items {
			if d.Version != v {
				continue
			}
			wg.Go(func() {
				<-start
				// Random jitter, so that redrive and acceptance race in
				// both orders: a sleep that is the point, not a wait.
				time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond)
				r := s.do(t, s.operator, http.MethodPost, "/v1/dead-letters/"+d.ID.String()+"/redrive", nil)
				key := fmt.Sprint(r.status)
				if r.status == http.StatusConflict {
					var p problem
					r.decode(t, &p)
					key += " " + p.Type[len("urn:converge:problem:"):]
				} else if r.status != http.StatusAccepted {
					t.Errorf("redrive: %d %s", r.status, r.body)
				}
				mu.Lock()
				outcomes[key]++
				mu.Unlock()
			})
			wg.Go(func() {
				<-start
				// Later on average than the redrive, so that both orders
				// happen (acceptance is the quicker transaction).
				time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond)
				r := s.do(t, "", http.MethodPost, "/v1/events", fmt.Sprintf(`{"kind": "build", "resource": %q, "version": %d}`, d.Resource, v+1))
				if r.status != http.StatusAccepted {
					t.Errorf("accept: %d %s", r.status, r.body)
				}
			})
		}
		close(start)
		wg.Wait()
		testkit.WaitFor(t, 60*time.Second, "every stream to apply the newer version", func() bool {
			return s.count(t, `SELECT count(*) FROM converge_streams WHERE applied_version = $1`, v+1) == streams
		})
	}
	// Let anything still in flight end before reading the log.
	testkit.WaitFor(t, 30*time.Second, "every run to finish", func() bool {
		return s.count(t, `SELECT count(*) FROM converge_runs WHERE status IN ('queued', 'running', 'retrying')`) == 0
	})
	highest := map[string]int64{}
	for i, c := range s.target.log() {
		if c.Version < highest[c.Resource] {
			t.Fatalf("call %d: %s version %d after version %d (G2)", i, c.Resource, c.Version, highest[c.Resource])
		}
		highest[c.Resource] = max(highest[c.Resource], c.Version)
	}
	if n := s.count(t, `SELECT count(*) FROM converge_streams WHERE applied_version = $1`, 2*rounds); n != streams {
		t.Fatalf("%d streams applied the last version", n)
	}
	// No redriven run of an older version may have succeeded after the newer one.
	if n := s.count(t, `SELECT count(*) FROM converge_runs o JOIN converge_runs n
		ON n.kind = o.kind AND n.resource = o.resource AND n.version > o.version
		WHERE o.status = 'succeeded' AND n.status = 'succeeded' AND o.finished_at > n.finished_at`); n != 0 {
		t.Fatalf("%d older runs succeeded after a newer one", n)
	}
	t.Logf("redrive answers over %d races: %v", streams*rounds, outcomes)
}

// TestBulkRedrivesOverlap: bulk redrives and discards of overlapping sets,
// each listing its ids in another order, run at once without deadlocks or
// errors, and each dead letter is acted on by exactly one of them.
func TestBulkRedrivesOverlap(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	var all []string
	for i := range 24 {
		// Some streams hold several dead letters.
		d := s.deadLetter(t, "build", fmt.Sprintf("app/overlap-%d", i%8), int64(i/8+1), converge.ClassPermanent, "boom")
		all = append(all, d.ID.String())
	}
	// Only the latest version of each stream can be redriven; the others
	// are skipped as superseded (or discarded by a discard).
	var wg sync.WaitGroup
	start := make(chan struct{})
	results := make([]bulkResult, 6)
	for g := range results {
		ids := append([]string(nil), all...)
		rand.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
		ids = ids[:16]
		action := "redrive"
		if g%3 == 2 {
			action = "discard"
		}
		wg.Go(func() {
			<-start
			results[g] = s.bulk(t, action, map[string]any{"ids": ids})
		})
	}
	close(start)
	wg.Wait()
	seen := map[string]int{}
	for _, res := range results {
		for _, id := range res.Done {
			seen[id.String()]++
		}
	}
	for id, n := range seen {
		if n != 1 {
			t.Fatalf("dead letter %s acted on %d times", id, n)
		}
	}
	if n := s.count(t, `SELECT count(*) FROM converge_runs WHERE number = 2`); n != s.count(t, `SELECT count(*) FROM converge_dead_letters WHERE status = 'redriven'`) {
		t.Fatalf("%d new runs for the redriven dead letters", n)
	}
	if n := s.count(t, `SELECT count(*) FROM converge_runs r JOIN converge_dead_letters d ON d.event_id = r.event_id
		WHERE r.number = 2 AND d.version < (SELECT latest_version FROM converge_streams s WHERE s.kind = d.kind AND s.resource = d.resource)`); n != 0 {
		t.Fatalf("%d redrives of superseded versions", n)
	}
}
