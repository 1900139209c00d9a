package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"time"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/config"
	"github.com/converge-run/converge/store"
	"github.com/converge-run/converge/target"
)

// Soak defaults and goal.
const (
	DefaultSoakDuration = 10 * time.Minute
	DefaultSoakRate     = 50.0
	soakStreams         = 200
	// soakFailEvery is how often an event fails for good (its dead letter
	// is discarded by the soak's operator, then pruned).
	soakFailEvery = 50
	// SoakGoal is the most the table sizes (rows, and bytes with indexes)
	// of the run's last third may exceed those of its middle third.
	SoakGoal = 1.10
)

// soakRetention is the soak's retention when Options.Retention is zero: a
// minute of everything, pruned every 10 seconds.
var soakRetention = converge.Retention{Runs: time.Minute, DeadLetters: time.Minute, WorkflowRuns: time.Minute,
	Deliveries: time.Minute, Audit: time.Minute, Interval: 10 * time.Second}

// Soak runs converge at a constant rate (o.Rate events per second, default
// 50, open loop, over 200 streams) for o.Duration (default 10m) with a
// short retention (o.Retention, default a minute, pruned every 10s by the
// periodic River job), against a target that fails one event in 50 for
// good; every 10s an operator discards the open dead letters. Table sizes
// (rows, and bytes with indexes) are sampled 30 times: with pruning they
// must level off. The goal: the mean rows and bytes of converge's tables in
// the last third are at most SoakGoal times those of the middle third.
// River's job table is reported beside them: its rows level off with
// River's job retention, but its GIN index on args grows until River's
// reindexer rebuilds it (daily by default). The rate is the
// accepts per second of the last third, the anchor that of the first
// (same run), and the latencies EventAccept's in the last third.
func Soak(ctx context.Context, o Options) (*Result, error) {
	o = o.withDefaults()
	if o.Duration <= 0 {
		o.Duration = DefaultSoakDuration
	}
	if o.Rate <= 0 {
		o.Rate = DefaultSoakRate
	}
	// --retain sets every age at once; --prune-interval the interval.
	ret := soakRetention
	if d := o.Retention.Runs; d > 0 {
		ret.Runs, ret.DeadLetters, ret.WorkflowRuns, ret.Deliveries, ret.Audit = d, d, d, d, d
	}
	if o.Retention.Interval > 0 {
		ret.Interval = o.Retention.Interval
	}
	o.Retention = ret
	return withScratch(ctx, o, func(s *scratch) (*Result, error) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var b struct {
				Payload struct {
					Fail bool `json:"fail"`
				} `json:"payload"`
			}
			_ = json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&b)
			w.Header().Set("Content-Type", "application/json")
			if b.Payload.Fail {
				w.WriteHeader(http.StatusUnprocessableEntity)
			}
			_, _ = w.Write([]byte("{}"))
		}))
		defer srv.Close()
		ht, err := target.NewHTTP(target.HTTPConfig{URL: srv.URL, Timeout: 10 * time.Second})
		if err != nil {
			return nil, err
		}
		admin, err := s.pool(ctx, 2)
		if err != nil {
			return nil, err
		}
		defer admin.Close()
		in, err := startInstance(ctx, s, o, ht)
		if err != nil {
			return nil, err
		}
		defer in.stop(ctx)
		o.logf("soak: %.0f events/s for %s, retention %s (dead letters %s), pruned every %s", o.Rate, o.Duration,
			o.Retention.Runs, o.Retention.DeadLetters, o.Retention.Interval)

		ctx, cancel := context.WithCancelCause(ctx)
		defer cancel(nil)
		start := time.Now()
		end := start.Add(o.Duration)
		type accept struct {
			at time.Duration
			d  time.Duration
		}
		var mu sync.Mutex
		var accepts []accept
		var versions [soakStreams]atomic.Int64
		var seq atomic.Int64
		var wg sync.WaitGroup

		// The operator: discards open dead letters every 10s.
		discarded := 0
		wg.Go(func() {
			t := time.NewTicker(10 * time.Second)
			defer t.Stop()
			for time.Now().Before(end) {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
				res, err := in.store.DeadLetterDiscardMany(ctx, store.DeadLetterBulkParams{Filter: &converge.DeadLetterFilter{},
					Audit: converge.AuditEntry{Actor: "soak", Role: string(converge.RoleOperator), Reason: "soak"}})
				if err != nil {
					cancel(err)
					return
				}
				discarded += len(res.Done)
			}
		})

		// Without autovacuum (off on the server of docs/benchmarks.md) the
		// space of pruned rows is never reused; the soak then vacuums the
		// tables itself every 30s, as autovacuum would.
		var autovacuum string
		if err := admin.QueryRow(ctx, `SHOW autovacuum`).Scan(&autovacuum); err != nil {
			return nil, fmt.Errorf("soak: %w", err)
		}
		vacuums := 0
		if autovacuum != "on" {
			o.logf("soak: autovacuum is %s: vacuuming the pruned tables every 30s", autovacuum)
			wg.Go(func() {
				t := time.NewTicker(30 * time.Second)
				defer t.Stop()
				for time.Now().Before(end) {
					select {
					case <-ctx.Done():
						return
					case <-t.C:
					}
					if _, err := admin.Exec(ctx, `VACUUM (ANALYZE) converge_events, converge_runs, converge_attempts,
						converge_dead_letters, converge_audit, converge_streams, river_job`); err != nil {
						cancel(fmt.Errorf("vacuum: %w", err))
						return
					}
					vacuums++
				}
			})
		}

		// The samples of the table sizes.
		samples := 30
		var series []sizes
		var sampleAt []time.Duration
		wg.Go(func() {
			every := o.Duration / time.Duration(samples)
			t := time.NewTicker(every)
			defer t.Stop()
			for range samples {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
				sz, err := tableSizes(ctx, admin)
				if err != nil {
					cancel(err)
					return
				}
				mu.Lock()
				series = append(series, sz)
				sampleAt = append(sampleAt, time.Since(start))
				mu.Unlock()
				rows, bytes := sz.converge()
				o.logf("soak %s: converge's tables %d rows, %s; river_job %d rows, %s", time.Since(start).Round(time.Second), rows, mib(bytes),
					sz.rows["river_job"], mib(sz.bytes["river_job"]))
			}
		})

		// The load: an open loop.
		tick := time.NewTicker(time.Duration(float64(time.Second) / o.Rate))
		for time.Now().Before(end) && ctx.Err() == nil {
			select {
			case <-tick.C:
			case <-ctx.Done():
			}
			n := seq.Add(1)
			i := int(n % soakStreams)
			v := versions[i].Add(1)
			payload := `{}`
			if n%soakFailEvery == 0 {
				payload = `{"fail":true}`
			}
			wg.Go(func() {
				t0 := time.Now()
				_, err := in.accept(ctx, store.EventAcceptParams{
					EventSubmission: converge.EventSubmission{Kind: benchKind, Resource: resourceName(i), Version: v, Payload: json.RawMessage(payload)},
					MaxAttempts:     config.DefaultMaxAttempts,
				})
				if err != nil {
					if ctx.Err() == nil {
						cancel(fmt.Errorf("accept: %w", err))
					}
					return
				}
				mu.Lock()
				accepts = append(accepts, accept{at: t0.Sub(start), d: time.Since(t0)})
				mu.Unlock()
			})
		}
		tick.Stop()
		wg.Wait()
		if err := context.Cause(ctx); err != nil {
			return nil, fmt.Errorf("soak: %w", err)
		}
		if len(series) < 6 {
			return nil, fmt.Errorf("soak: only %d samples of the table sizes", len(series))
		}

		third := o.Duration / 3
		var first, last []time.Duration
		for _, a := range accepts {
			switch {
			case a.at < third:
				first = append(first, a.d)
			case a.at >= 2*third:
				last = append(last, a.d)
			}
		}
		meanOf := func(from, to int, of func(sizes) (int64, int64)) (rows, bytes float64) {
			for _, sz := range series[from:to] {
				r, b := of(sz)
				rows += float64(r)
				bytes += float64(b)
			}
			n := float64(to - from)
			return rows / n, bytes / n
		}
		river := func(sz sizes) (int64, int64) { return sz.rows["river_job"], sz.bytes["river_job"] }
		k := len(series) / 3
		midRows, midBytes := meanOf(k, 2*k, sizes.converge)
		lastRows, lastBytes := meanOf(2*k, len(series), sizes.converge)
		riverMidRows, riverMidBytes := meanOf(k, 2*k, river)
		riverLastRows, riverLastBytes := meanOf(2*k, len(series), river)
		r := &Result{
			Benchmark: "soak", RateUnit: "events/s",
			Rate:       perSecond(len(last), o.Duration-2*third),
			AnchorRate: perSecond(len(first), third),
			Anchor:     "the same run's first third",
			Latency:    "EventAccept in the last third",
			Goal:       fmt.Sprintf("converge's tables: rows and bytes of the last third <= %.2f × the middle third's", SoakGoal),
		}
		r.Ratio = ratio(r.Rate, r.AnchorRate)
		r.P50, r.P95, r.P99 = percentiles(last)
		rowsGrowth, bytesGrowth := ratio(lastRows, midRows), ratio(lastBytes, midBytes)
		r.GoalMet = rowsGrowth <= SoakGoal && bytesGrowth <= SoakGoal
		r.add("duration_s", "duration (s)", round(o.Duration.Seconds(), 0))
		r.add("offered_rate", "offered rate (events/s)", o.Rate)
		r.add("events", "events accepted", len(accepts))
		r.add("dead_letters_discarded", "dead letters discarded by the operator", discarded)
		r.add("retention_runs_s", "retention.runs (s)", o.Retention.Runs.Seconds())
		r.add("retention_interval_s", "retention.interval (s)", o.Retention.Interval.Seconds())
		r.add("autovacuum", "server autovacuum", autovacuum)
		r.add("vacuums_by_bench", "VACUUMs run by the soak (autovacuum off)", vacuums)
		r.add("rows_growth", "converge's tables, rows: last third / middle third", round(rowsGrowth, 3))
		r.add("bytes_growth", "converge's tables, bytes: last third / middle third", round(bytesGrowth, 3))
		r.add("river_rows_growth", "river_job, rows: last third / middle third", round(ratio(riverLastRows, riverMidRows), 3))
		r.add("river_bytes_growth", "river_job, bytes: last third / middle third (its GIN args index grows until River's daily reindex)",
			round(ratio(riverLastBytes, riverMidBytes), 3))
		r.add("accept_p99_first_third_ms", "EventAccept p99, first third", percentile(first, 99))
		var rowsSeries, bytesSeries []int64
		for i, sz := range series {
			rows, bytes := sz.converge()
			rowsSeries, bytesSeries = append(rowsSeries, rows), append(bytesSeries, bytes)
			r.add("", fmt.Sprintf("  at %s", sampleAt[i].Round(time.Second)), fmt.Sprintf("converge %d rows, %s (events %d, runs %d, attempts %d); river_job %d rows, %s",
				rows, mib(bytes), sz.rows["converge_events"], sz.rows["converge_runs"], sz.rows["converge_attempts"], sz.rows["river_job"], mib(sz.bytes["river_job"])))
		}
		r.add("rows_series", "", rowsSeries)
		r.add("bytes_series", "", bytesSeries)
		r.add("table_rows_end", "", series[len(series)-1].rows)
		r.add("table_bytes_end", "", series[len(series)-1].bytes)
		return r, nil
	})
}
