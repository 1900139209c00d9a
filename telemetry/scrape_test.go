package telemetry_test

import (
	"io"
	"maps"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// exposition is what a /metrics page of a registry shows, parsed: the type
// of each metric family and its samples.
type exposition struct {
	types   map[string]string // family name -> counter, gauge, histogram
	samples []sample
}

// sample is one line of the text exposition format.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

var (
	sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$`)
	labelPair  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)
)

// scrape serves reg as /metrics does (promhttp, text format) and parses it.
func scrape(t *testing.T, reg prometheus.Gatherer) exposition {
	t.Helper()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "/metrics", nil)
	req.Header.Set("Accept", "text/plain")
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError}).ServeHTTP(rec, req)
	if rec.Code != 200 {
		t.Fatalf("/metrics answered %d: %s", rec.Code, rec.Body)
	}
	body, _ := io.ReadAll(rec.Body)
	e := exposition{types: map[string]string{}}
	for line := range strings.SplitSeq(string(body), "\n") {
		if f, ok := strings.CutPrefix(line, "# TYPE "); ok {
			name, typ, _ := strings.Cut(f, " ")
			e.types[name] = typ
			continue
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		m := sampleLine.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("unparsable /metrics line %q", line)
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			t.Fatalf("/metrics line %q: %v", line, err)
		}
		s := sample{name: m[1], labels: map[string]string{}, value: v}
		for _, lp := range labelPair.FindAllStringSubmatch(m[2], -1) {
			s.labels[lp[1]] = lp[2]
		}
		e.samples = append(e.samples, s)
	}
	return e
}

// series are the samples of family name: for a histogram, its _count
// samples (one per series).
func (e exposition) series(name string) []sample {
	want := name
	if e.types[name] == "histogram" {
		want = name + "_count"
	}
	var out []sample
	for _, s := range e.samples {
		if s.name == want {
			out = append(out, s)
		}
	}
	return out
}

// value is the value of the series of family name with exactly labels (a
// histogram's count, or its sum when sum is set); ok is false when there
// is no such series.
func (e exposition) value(name string, labels ...string) (float64, bool) {
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	for _, s := range e.series(name) {
		if maps.Equal(s.labels, want) {
			return s.value, true
		}
	}
	return 0, false
}

// sum is the _sum of histogram name's series with labels.
func (e exposition) sum(name string, labels ...string) float64 {
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	for _, s := range e.samples {
		if s.name == name+"_sum" && maps.Equal(s.labels, want) {
			return s.value
		}
	}
	return -1
}

// labelValues is the sorted set of values of label in family name.
func (e exposition) labelValues(name, label string) []string {
	var vs []string
	for _, s := range e.series(name) {
		if v, ok := s.labels[label]; ok && !slices.Contains(vs, v) {
			vs = append(vs, v)
		}
	}
	slices.Sort(vs)
	return vs
}
