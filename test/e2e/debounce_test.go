package e2e

import (
	"fmt"
	"net/http"
	"testing"
	"time"

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
	pgtest.URL(t)
	cvproc.Build(t)
	target := newFakeTarget(t)
	cfg := testkit.ConfigFile(t, serveConfig(pgtest.NewDatabase(t), target.srv.URL, "5s"))
	p := start(t, cvproc.Env("CONVERGE_ADMIN_TOKEN="+adminToken), "serve", "--config", cfg)
	base := p.URL(t, 30*time.Second)
	cvproc.WaitHTTP(t, base+"/readyz", 30*time.Second)
	c := client{base: base, token: adminToken}
	const debounce = 200 * time.Millisecond
	const n = 10
	const pause = 80 * time.Millisecond

	for try := 0; ; try++ {
		if try == 3 {
			t.Fatalf("in 3 bursts, none had every version accepted within the debounce (%v) of the one before", debounce)
		}
		resource := fmt.Sprintf("app/burst-%d", try)
		ids := make([]string, n)
		for v := range n {
			if v > 0 {
				time.Sleep(pause)
			}
			ids[v] = c.submit(t, "build", resource, int64(v+1), map[string]any{"v": v + 1})
		}
		last := c.waitEvent(t, ids[n-1], 20*time.Second)
		if last["status"] != "succeeded" {
			t.Fatalf("%s@%d: %v, want succeeded", resource, n, last["status"])
		}
		var prev time.Time
		apart := time.Duration(0)
		for v, id := range ids {
			ev := c.waitEvent(t, id, 20*time.Second)
			at, err := time.Parse(time.RFC3339Nano, fmt.Sprint(ev["received_at"]))
			if err != nil {
				t.Fatalf("%s@%d received_at %v: %v", resource, v+1, ev["received_at"], err)
			}
			if v > 0 {
				apart = max(apart, at.Sub(prev))
			}
			prev = at
			if v < n-1 && apart < debounce && ev["status"] != "superseded" {
				t.Errorf("%s@%d: %v, want superseded", resource, v+1, ev["status"])
			}
		}
		var calls []targetCall
		for _, call := range target.received() {
			if call.body["resource"] == resource {
				calls = append(calls, call)
			}
		}
		if apart >= debounce-10*time.Millisecond {
			t.Logf("%s: two versions accepted %v apart (not a burst); trying another stream (%d calls)", resource, apart, len(calls))
			continue
		}
		if len(calls) != 1 || calls[0].body["version"] != float64(n) {
			versions := make([]any, len(calls))
			for i, call := range calls {
				versions[i] = call.body["version"]
			}
			t.Fatalf("%s: target called for versions %v, want only %d (accepts at most %v apart)", resource, versions, n, apart)
		}
		status, res := c.do(t, http.MethodGet, "/v1/resources/build/"+resource, nil)
		if status != http.StatusOK || res["applied_version"] != float64(n) {
			t.Errorf("resource %s: %d %v, want applied_version %d", resource, status, res, n)
		}
		t.Logf("%s: %d versions at most %v apart, 1 target call", resource, n, apart)
		return
	}
}
