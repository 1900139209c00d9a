package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Result is what one benchmark measured.
type Result struct {
	// Benchmark is the benchmark's name: pipeline, ingest, storm or dlq.
	Benchmark string
	// Rate is converge's rate, in RateUnit.
	Rate     float64
	RateUnit string
	// AnchorRate is the anchor's rate in the same unit, measured in the same
	// run; Anchor says what the anchor is.
	AnchorRate float64
	Anchor     string
	// Ratio is Rate / AnchorRate.
	Ratio float64
	// P50, P95 and P99 are converge's latency percentiles; Latency says
	// what the latency is of.
	P50, P95, P99 time.Duration
	Latency       string
	// Goal is the benchmark's goal in words and GoalMet whether this run
	// met it.
	Goal    string
	GoalMet bool
	// Details are further measurements, in order.
	Details []Detail
}

// Detail is one named measurement of a Result.
type Detail struct {
	Key   string // snake_case, the JSON key; empty: the table only
	Label string // for the table; empty: the JSON only
	Value any
}

func (r *Result) add(key, label string, v any) {
	r.Details = append(r.Details, Detail{Key: key, Label: label, Value: v})
}

// addRiverSettings adds the River settings converge and its anchor ran
// with: workers (River MaxWorkers, in the table as workersLabel), pool
// size, fetch cooldown and fetch poll interval.
func (r *Result) addRiverSettings(o Options, workersLabel string) {
	r.add("workers", workersLabel, o.Workers)
	r.add("pool_size", "pool size", o.PoolSize)
	r.add("fetch_cooldown_ms", "fetch cooldown", o.FetchCooldown)
	r.add("fetch_poll_interval_ms", "fetch poll interval", o.FetchPollInterval)
}

// MarshalJSON writes the result as one flat JSON object: benchmark, rate,
// anchor_rate, ratio, p50_ms, p95_ms, p99_ms, then the details.
func (r *Result) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	first := true
	put := func(k string, v any) error {
		data, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("%s: %w", k, err)
		}
		if !first {
			b.WriteByte(',')
		}
		first = false
		key, _ := json.Marshal(k)
		b.Write(key)
		b.WriteByte(':')
		b.Write(data)
		return nil
	}
	fields := []Detail{
		{Key: "benchmark", Value: r.Benchmark},
		{Key: "rate", Value: round(r.Rate, 1)},
		{Key: "rate_unit", Value: r.RateUnit},
		{Key: "anchor", Value: r.Anchor},
		{Key: "anchor_rate", Value: round(r.AnchorRate, 1)},
		{Key: "ratio", Value: round(r.Ratio, 3)},
		{Key: "latency", Value: r.Latency},
		{Key: "p50_ms", Value: ms(r.P50)},
		{Key: "p95_ms", Value: ms(r.P95)},
		{Key: "p99_ms", Value: ms(r.P99)},
		{Key: "goal", Value: r.Goal},
		{Key: "goal_met", Value: r.GoalMet},
	}
	for _, d := range append(fields, r.Details...) {
		if d.Key == "" {
			continue
		}
		v := d.Value
		switch x := v.(type) {
		case time.Duration:
			v = ms(x)
		case float64:
			v = round(x, 3)
		}
		if err := put(d.Key, v); err != nil {
			return nil, err
		}
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// WriteTable prints the result as a two-column table.
func (r *Result) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k string, v any) { fmt.Fprintf(tw, "%s\t%s\n", k, format(v)) }
	row("benchmark", r.Benchmark)
	row("converge", fmt.Sprintf("%.0f %s", r.Rate, r.RateUnit))
	row("anchor", fmt.Sprintf("%.0f %s (%s)", r.AnchorRate, r.RateUnit, r.Anchor))
	row("ratio", fmt.Sprintf("%.3f", r.Ratio))
	row("latency", fmt.Sprintf("p50 %s  p95 %s  p99 %s (%s)", format(r.P50), format(r.P95), format(r.P99), r.Latency))
	met := "not met"
	if r.GoalMet {
		met = "met"
	}
	row("goal", r.Goal+": "+met)
	for _, d := range r.Details {
		if d.Label != "" {
			row(d.Label, d.Value)
		}
	}
	return tw.Flush()
}

func format(v any) string {
	switch x := v.(type) {
	case time.Duration:
		switch {
		case x >= 10*time.Second:
			return x.Round(100 * time.Millisecond).String()
		case x >= time.Millisecond:
			return fmt.Sprintf("%.1fms", float64(x)/float64(time.Millisecond))
		default:
			return fmt.Sprintf("%.3fms", float64(x)/float64(time.Millisecond))
		}
	case float64:
		switch {
		case x == math.Trunc(x) && math.Abs(x) < 1e15:
			return fmt.Sprintf("%.0f", x)
		case math.Abs(x) >= 100:
			return fmt.Sprintf("%.1f", x)
		}
		return fmt.Sprintf("%.3f", x)
	case []string:
		return strings.Join(x, ", ")
	default:
		return fmt.Sprint(v)
	}
}

func ms(d time.Duration) float64 { return round(float64(d)/float64(time.Millisecond), 3) }

func round(f float64, places int) float64 {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0
	}
	p := math.Pow(10, float64(places))
	return math.Round(f*p) / p
}

// percentiles returns the 50th, 95th and 99th percentiles of ds (nearest
// rank); ds is sorted in place.
func percentiles(ds []time.Duration) (p50, p95, p99 time.Duration) {
	return percentile(ds, 50), percentile(ds, 95), percentile(ds, 99)
}

// percentile returns the p-th percentile of ds by nearest rank, sorting ds
// in place; zero for an empty slice.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	if !slices.IsSorted(ds) {
		slices.Sort(ds)
	}
	rank := int(math.Ceil(p / 100 * float64(len(ds))))
	rank = min(max(rank, 1), len(ds))
	return ds[rank-1]
}

// perSecond is n per the duration d.
func perSecond(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// ratio is a / b, zero when b is zero.
func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}
