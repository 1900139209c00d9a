package pooler

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/converge-run/converge/test/pgtest"
	"github.com/converge-run/converge/test/testkit"
)

// TestPoolerCost measures what PgBouncer in transaction mode costs: the
// same load (POOLER_COST_EVENTS events, default 2000, on 200 streams, from
// 16 clients, each run to success against an instant target) through one
// `converge serve` per setup, direct (pooler none) and through PgBouncer
// (pooler transaction, River listening over direct_url), alternated
// A B A B on fresh databases so that both see the same machine. It prints
// the accept rate, the accept latency percentiles and the rate at which
// runs finish. It runs only with POOLER_COST=1 (POOLER_COST_ROUNDS, default 2, sets
// the rounds; docs/operations.md has the numbers).
func TestPoolerCost(t *testing.T) {
	if os.Getenv("POOLER_COST") != "1" {
		t.Skip("set POOLER_COST=1 to measure")
	}
	events := 2000
	if v := os.Getenv("POOLER_COST_EVENTS"); v != "" {
		_, _ = fmt.Sscan(v, &events)
	}
	type result struct {
		setup                string
		acceptRate, doneRate float64
		p50, p95, p99        time.Duration
	}
	rounds := 2
	if v := os.Getenv("POOLER_COST_ROUNDS"); v != "" {
		_, _ = fmt.Sscan(v, &rounds)
	}
	var results []result
	for range rounds {
		for _, pooled := range []bool{false, true} {
			direct := pgtest.NewDatabase(t)
			tg := newTarget(t)
			var cfg, setup string
			if pooled {
				b := startBouncer(t, direct)
				cfg = config(b.URL(direct), direct, tg, "")
				setup = "PgBouncer, pooler transaction"
			} else {
				cfg = strings.Replace(config(direct, "", tg, ""), "  pooler: transaction\n", "  pooler: none\n", 1)
				setup = "direct, pooler none"
			}
			cfg = strings.Replace(cfg, "    max_attempts: 1\n", "    max_attempts: 1\n    concurrency: 20\n", 1)
			_, base := proc(t, "serve", "--config", testkit.ConfigFile(t, cfg))
			lat, acceptRate, doneRate := load(t, base, events)
			slices.Sort(lat)
			pct := func(p float64) time.Duration { return lat[int(p*float64(len(lat)-1))] }
			results = append(results, result{setup, acceptRate, doneRate, pct(0.50), pct(0.95), pct(0.99)})
		}
	}
	var out strings.Builder
	fmt.Fprintf(&out, "%d events, 200 streams, 16 clients, one serve:\n", events)
	fmt.Fprintf(&out, "| setup | accepted/s | accept p50 | p95 | p99 | runs finished/s |\n|---|---|---|---|---|---|\n")
	for _, r := range results {
		fmt.Fprintf(&out, "| %s | %.0f | %.1f ms | %.1f ms | %.1f ms | %.0f |\n", r.setup, r.acceptRate,
			float64(r.p50.Microseconds())/1000, float64(r.p95.Microseconds())/1000, float64(r.p99.Microseconds())/1000, r.doneRate)
	}
	t.Log("\n" + out.String())
}

// load posts events events (versions rising on 200 streams) from 16
// clients to base and waits until every stream has applied its last
// version; it returns the accept latencies, the accept rate and the rate
// of finished runs (events over the time from the first post until all
// were applied).
func load(t *testing.T, base string, events int) ([]time.Duration, float64, float64) {
	t.Helper()
	const streams, clients = 200, 16
	work := make(chan int, events)
	for i := range events {
		work <- i
	}
	close(work)
	var mu sync.Mutex
	lat := make([]time.Duration, 0, events)
	client := &http.Client{Timeout: time.Minute}
	began := time.Now()
	var wg sync.WaitGroup
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				body, _ := json.Marshal(map[string]any{"kind": "build", "resource": fmt.Sprintf("app/%d", i%streams),
					"version": i/streams + 1, "payload": payload(i, false)})
				req, _ := http.NewRequest(http.MethodPost, base+"/v1/events", bytes.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+adminToken)
				req.Header.Set("Content-Type", "application/json")
				t0 := time.Now()
				resp, err := client.Do(req)
				d := time.Since(t0)
				if err != nil {
					t.Errorf("post: %v", err)
					return
				}
				_ = resp.Body.Close()
				if resp.StatusCode != http.StatusAccepted {
					t.Errorf("post event %d: %d", i, resp.StatusCode)
				}
				mu.Lock()
				lat = append(lat, d)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	accepted := time.Since(began)
	last := (events-1)/streams + 1
	testkit.Eventually(t, 5*time.Minute, func() (bool, string) {
		for s := range streams {
			if s >= events {
				break
			}
			want := last
			if s >= events%streams && events%streams != 0 {
				want = last - 1
			}
			a := call(t, base, http.MethodGet, fmt.Sprintf("/v1/resources/build/app/%d", s), nil)
			if fmt.Sprint(a.Body["applied_version"]) != fmt.Sprint(want) {
				return false, fmt.Sprintf("app/%d applied %v, want %d", s, a.Body["applied_version"], want)
			}
		}
		return true, ""
	})
	done := time.Since(began)
	return lat, float64(events) / accepted.Seconds(), float64(events) / done.Seconds()
}
