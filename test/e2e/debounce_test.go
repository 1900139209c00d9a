package e2e

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/converge-run/converge/store"
	"github.com/converge-run/converge/test/cvproc"
	"github.com/converge-run/converge/test/pgtest"
	"github.com/converge-run/converge/test/testkit"
)

// TestDebounceBurst: converge serve with the default debounce (200ms,
// SPEC §6) and a burst of 10 versions of a stream never seen before, each
// submitted a pause after the one before (shorter than the debounce, and
// longer than a worker takes to begin a run available at once, so that
// a first version started at once would be called): the target is
// called once, for the last version, and the other nine end superseded
// without a call. The verdict needs each
// version accepted less than the debounce after the one before (read
// from the events' received_at); a burst that came apart on a loaded
// machine is tried again on a new stream.
func TestDebounceBurst(t *testing.T) {
	t.Parallel()
	const n = 10
	s := newBurstServer(t)
	for try := 0; ; try++ {
		if try == 3 {
			t.Fatalf("in 3 bursts, none had every version accepted within the debounce (%v) of the one before", burstDebounce)
		}
		resource := fmt.Sprintf("app/burst-%d", try)
		b := s.burst(t, resource, n, burstPause)
		for v, ev := range b.events[:n-1] {
			if b.apart < burstDebounce && ev["status"] != "superseded" {
				t.Errorf("%s@%d: %v, want superseded", resource, v+1, ev["status"])
			}
		}
		calls := s.calledVersions(resource)
		if b.apart >= burstDebounce-10*time.Millisecond {
			t.Logf("%s: two versions accepted %v apart (not a burst); trying another stream (%d calls)", resource, b.apart, len(calls))
			continue
		}
		if len(calls) != 1 || calls[0] != n {
			t.Fatalf("%s: target called for versions %v, want only %d (accepts at most %v apart)", resource, calls, n, b.apart)
		}
		status, res := s.c.do(t, http.MethodGet, "/v1/resources/build/"+resource, nil)
		if status != http.StatusOK || res["applied_version"] != float64(n) {
			t.Errorf("resource %s: %d %v, want applied_version %d", resource, status, res, n)
		}
		t.Logf("%s: %d versions at most %v apart, 1 target call", resource, n, b.apart)
		return
	}
}

// TestDebounceLongBurst: versions that keep arriving less than the
// debounce apart for longer than store.BurstMaxDebounces debounces (4s
// at the default 200ms) still reach the target before the burst ends:
// the debounce holds a burst back at most that long from its first
// version (SPEC §6), where it once held the stream back for as long as
// versions kept coming. 130 versions are submitted 40ms apart (over 5s).
// The verdict is on the longest stretch of them accepted each less than
// the debounce after the one before (a slow submission on a loaded
// machine splits the burst): when it lasts over the bound, a version of
// it other than its last must have been called, one accepted at most the
// bound (and a second of slack) into it; before the bound, nothing of it
// could be. The last version is applied.
func TestDebounceLongBurst(t *testing.T) {
	t.Parallel()
	const n = 130
	bound := store.BurstMaxDebounces * burstDebounce
	s := newBurstServer(t)
	for try := 0; ; try++ {
		if try == 3 {
			t.Fatalf("in 3 tries, no stretch of versions each accepted within the debounce (%v) of the one before lasted over %v", burstDebounce, bound)
		}
		resource := fmt.Sprintf("app/long-burst-%d", try)
		b := s.burst(t, resource, n, burstPause/2)
		first, last := b.longestBurst(burstDebounce - 10*time.Millisecond) // versions first+1 to last+1
		length := b.received[last].Sub(b.received[first])
		if length <= bound+500*time.Millisecond {
			t.Logf("%s: the longest burst, versions %d to %d, lasted %v; trying another stream", resource, first+1, last+1, length)
			continue
		}
		calls := s.calledVersions(resource)
		called := -1 // the first version of the burst called, but its last
		for _, v := range calls {
			if v > first && v <= last {
				called = v
				break
			}
		}
		if called < 0 {
			t.Fatalf("%s: target called for versions %v, want one of versions %d to %d (a burst of %v, over the bound %v) before its last",
				resource, calls, first+1, last, length, bound)
		}
		into := b.received[called-1].Sub(b.received[first])
		if into > bound+time.Second {
			t.Errorf("%s: the first version of the burst called (%d) was accepted %v into it, want at most %v", resource, called, into, bound+time.Second)
		}
		status, res := s.c.do(t, http.MethodGet, "/v1/resources/build/"+resource, nil)
		if status != http.StatusOK || res["applied_version"] != float64(n) {
			t.Errorf("resource %s: %d %v, want applied_version %d", resource, status, res, n)
		}
		t.Logf("%s: a burst of versions %d to %d over %v; target called for versions %v, the first of the burst %v into it",
			resource, first+1, last+1, length, calls, into)
		return
	}
}

// burstDebounce is the kind's debounce in serveConfig (the default).
const burstDebounce = 200 * time.Millisecond

// burstPause is the pause between the versions of a burst: shorter than
// the debounce, and longer than a worker takes to begin a run available
// at once.
const burstPause = 80 * time.Millisecond

// burstServer is converge serve with the default debounce and a fake
// target.
type burstServer struct {
	target *fakeTarget
	c      client
}

func newBurstServer(t *testing.T) *burstServer {
	t.Helper()
	pgtest.URL(t)
	cvproc.Build(t)
	target := newFakeTarget(t)
	cfg := testkit.ConfigFile(t, serveConfig(pgtest.NewDatabase(t), target.srv.URL, "5s"))
	p := start(t, cvproc.Env("CONVERGE_ADMIN_TOKEN="+adminToken), "serve", "--config", cfg)
	base := p.URL(t, 30*time.Second)
	cvproc.WaitHTTP(t, base+"/readyz", 30*time.Second)
	return &burstServer{target: target, c: client{base: base, token: adminToken}}
}

// burstResult is a burst's events, as they ended, their received_at and
// the longest time between two of them.
type burstResult struct {
	events   []map[string]any
	received []time.Time
	apart    time.Duration
}

// burst submits versions 1 to n of build resource, pause apart, and waits
// for each to end.
func (s *burstServer) burst(t *testing.T, resource string, n int, pause time.Duration) burstResult {
	t.Helper()
	ids := make([]string, n)
	for v := range n {
		if v > 0 {
			time.Sleep(pause)
		}
		ids[v] = s.c.submit(t, "build", resource, int64(v+1), map[string]any{"v": v + 1})
	}
	if last := s.c.waitEvent(t, ids[n-1], 20*time.Second); last["status"] != "succeeded" {
		t.Fatalf("%s@%d: %v, want succeeded", resource, n, last["status"])
	}
	var b burstResult
	for v, id := range ids {
		ev := s.c.waitEvent(t, id, 20*time.Second)
		at, err := time.Parse(time.RFC3339Nano, fmt.Sprint(ev["received_at"]))
		if err != nil {
			t.Fatalf("%s@%d received_at %v: %v", resource, v+1, ev["received_at"], err)
		}
		if v > 0 {
			b.apart = max(b.apart, at.Sub(b.received[v-1]))
		}
		b.events, b.received = append(b.events, ev), append(b.received, at)
	}
	return b
}

// longestBurst returns the first and last index of the longest stretch
// (in time) of b's versions each accepted less than gap after the one
// before.
func (b burstResult) longestBurst(gap time.Duration) (first, last int) {
	start := 0
	for i := 1; i <= len(b.received); i++ {
		if i < len(b.received) && b.received[i].Sub(b.received[i-1]) < gap {
			continue
		}
		if b.received[i-1].Sub(b.received[start]) > b.received[last].Sub(b.received[first]) {
			first, last = start, i-1
		}
		start = i
	}
	return first, last
}

// calledVersions returns the versions of resource the target was called
// for, in the order of the calls.
func (s *burstServer) calledVersions(resource string) []int {
	var versions []int
	for _, call := range s.target.received() {
		if call.body["resource"] == resource {
			v, _ := call.body["version"].(float64)
			versions = append(versions, int(v))
		}
	}
	return versions
}
