package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"sync/atomic"
	"time"

	"github.com/converge-run/converge/telemetry"
)

// TracingGoal is the ratio of traced to untraced pipeline rate the tracing
// overhead aims at: under 10% slower.
const TracingGoal = 0.90

// tracingRounds is how many untraced-then-traced pairs PipelineTracing
// runs: five, so that the medians stand when one run is hit by another
// process's burst on a shared machine.
const tracingRounds = 5

// PipelineTracing measures what OpenTelemetry tracing costs converge: the
// pipeline of Pipeline (accept as the API does it, with its accept span;
// the workers' attempt spans, each the client span of its HTTP call, with
// its traceparent) run with tracing on, every span sampled unless
// OTEL_TRACES_SAMPLER says otherwise, exporting with OTLP/HTTP to a
// receiver on loopback that reads and drops every export, against the same
// pipeline with tracing off (the no-op tracer) as the anchor. The two
// alternate, tracingRounds times each, each run on a scratch database of
// its own, so that drift in the machine's load affects both alike; each
// side's rate is the median of its runs (the means are reported too). The
// receiver runs in this process: its work is counted against the traced
// side (a real collector would run elsewhere).
func PipelineTracing(ctx context.Context, o Options) (*Result, error) {
	o = o.withDefaults()
	if o.Events <= 0 {
		o.Events = DefaultPipelineEvents
	}
	if o.Streams <= 0 {
		o.Streams = DefaultPipelineStreams
	}
	o.Streams = min(o.Streams, o.Events)
	sink, err := newOTLPSink()
	if err != nil {
		return nil, err
	}
	defer sink.close()

	var plain, traced []pipelineRun
	one := func(trace bool) error {
		var tr *telemetry.Tracing
		if trace {
			// The sink is the endpoint whatever the environment says; the
			// other settings (OTEL_TRACES_SAMPLER, OTEL_BSP_*) are the
			// environment's, as in a converge process.
			env := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": sink.url, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": sink.url + "/v1/traces",
				"OTEL_EXPORTER_OTLP_PROTOCOL": "", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "", "OTEL_SDK_DISABLED": ""}
			getenv := func(k string) string {
				if v, ok := env[k]; ok {
					return v
				}
				return os.Getenv(k)
			}
			var err error
			tr, err = telemetry.StartTracing(ctx, getenv, "bench", o.Logger)
			if err != nil {
				return err
			}
		}
		var run pipelineRun
		_, err := withScratch(ctx, o, func(s *scratch) (*Result, error) {
			conv := func() error {
				var err error
				run, err = pipelineConverge(ctx, s, o)
				return err
			}
			// --cpuprofile profiles the first traced run.
			if trace && len(traced) == 0 {
				return nil, o.profile(conv)
			}
			return nil, conv()
		})
		if tr != nil {
			// The spans still buffered are exported before the next run.
			if serr := tr.Shutdown(context.WithoutCancel(ctx)); serr != nil && err == nil {
				err = fmt.Errorf("flush spans: %w", serr)
			}
		}
		if err != nil {
			return err
		}
		what := "untraced"
		if trace {
			what = "traced"
			traced = append(traced, run)
		} else {
			plain = append(plain, run)
		}
		o.logf("converge %s: %.0f events/s", what, perSecond(o.Events, run.elapsed))
		return nil
	}
	o.logf("tracing: %d events over %d streams, %d rounds of untraced then traced, OTLP/HTTP to %s", o.Events, o.Streams, tracingRounds, sink.url)
	for range tracingRounds {
		if err := one(false); err != nil {
			return nil, err
		}
		if err := one(true); err != nil {
			return nil, err
		}
	}

	rates := func(runs []pipelineRun) []float64 {
		out := make([]float64, len(runs))
		for i, r := range runs {
			out[i] = perSecond(o.Events, r.elapsed)
		}
		return out
	}
	tracedRates, plainRates := rates(traced), rates(plain)
	r := &Result{
		Benchmark: "pipeline", RateUnit: "events/s",
		Rate:       medianOf(tracedRates),
		AnchorRate: medianOf(plainRates),
		Anchor:     "the same pipeline with tracing off (no-op tracer), alternating with the traced runs; medians of the runs",
		Latency:    "accept to finish of the traced runs (runs.created_at to finished_at)",
		Goal:       fmt.Sprintf("ratio >= %.2f (tracing under 10%% slower)", TracingGoal),
	}
	r.Ratio = ratio(r.Rate, r.AnchorRate)
	r.GoalMet = r.Ratio >= TracingGoal
	var lat []time.Duration
	for _, t := range traced {
		lat = append(lat, t.latencies...)
	}
	r.P50, r.P95, r.P99 = percentiles(lat)
	r.add("mode", "mode", "tracing: traced vs untraced")
	r.add("events", "events per run", o.Events)
	r.add("streams", "streams", o.Streams)
	r.add("workers", "workers (River MaxWorkers)", o.Workers)
	r.add("rounds", "untraced/traced pairs", tracingRounds)
	r.add("ratio_of_means", "traced/untraced, means of the runs", round(ratio(meanOf(tracedRates), meanOf(plainRates)), 3))
	pairs := make([]float64, tracingRounds)
	for i := range pairs {
		pairs[i] = ratio(tracedRates[i], plainRates[i])
	}
	r.add("pair_ratio_median", "median of each traced run over the untraced run before it", round(medianOf(pairs), 3))
	for i := range tracingRounds {
		r.add(fmt.Sprintf("untraced_rate_%d", i+1), fmt.Sprintf("untraced run %d (events/s)", i+1), round(perSecond(o.Events, plain[i].elapsed), 1))
		r.add(fmt.Sprintf("traced_rate_%d", i+1), fmt.Sprintf("traced run %d (events/s)", i+1), round(perSecond(o.Events, traced[i].elapsed), 1))
	}
	var plainCPU, tracedCPU cpuUsage
	for i := range tracingRounds {
		plainCPU = plainCPU.plus(plain[i].cpu)
		tracedCPU = tracedCPU.plus(traced[i].cpu)
	}
	// CPU per event is steadier than the rate on a shared machine: what
	// tracing costs this process (spans, export) and the database.
	addCPU(r, tracedCPU, plainCPU, tracingRounds*o.Events, tracingRounds*o.Events)
	r.add("otlp_exports", "OTLP export requests received", sink.requests.Load())
	r.add("otlp_bytes", "OTLP bytes received", sink.bytes.Load())
	r.add("spans_per_event", "spans per event (accept; attempt; the HTTP call's client span, converge.http)", 3)
	return r, nil
}

// medianOf is the median of xs (not empty).
func medianOf(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

// meanOf is the mean of xs (not empty).
func meanOf(xs []float64) float64 {
	var sum float64
	for _, x := range xs {
		sum += x
	}
	return sum / float64(len(xs))
}

// otlpSink is an OTLP/HTTP trace receiver on loopback that reads each
// export, counts it and answers success: the far end of the traced runs.
type otlpSink struct {
	url            string
	srv            *http.Server
	requests       atomic.Int64
	bytes          atomic.Int64
	requestsFailed atomic.Int64
}

func newOTLPSink() (*otlpSink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("otlp receiver: %w", err)
	}
	s := &otlpSink{url: "http://" + ln.Addr().String()}
	s.srv = &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, err := io.Copy(io.Discard, r.Body)
		if err != nil || r.URL.Path != "/v1/traces" {
			s.requestsFailed.Add(1)
			http.Error(w, "bad export", http.StatusBadRequest)
			return
		}
		s.requests.Add(1)
		s.bytes.Add(n)
		// An empty ExportTraceServiceResponse: zero bytes of protobuf.
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	})}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

func (s *otlpSink) close() { _ = s.srv.Close() }
