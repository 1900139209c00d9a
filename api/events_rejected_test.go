package api_test

import (
	"bufio"
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/api"
	"github.com/converge-run/converge/jobs"
	"github.com/converge-run/converge/telemetry"
	"github.com/converge-run/converge/test/pgtest"
)

// TestEventsRejectedKind: converge_events_rejected_total counts a refused
// POST /v1/events under the kind its body names whenever that is a
// configured kind, whatever else is wrong with the body (SPEC §14), text
// the UTF-8/NUL check refuses included, and under unknown when the kind is
// not configured, is itself the bad text, or the body could not be read as
// a JSON object: a body that is not JSON, over the body limit, not sent as
// JSON, or refused before it is read (headers over the limit: 431).
func TestEventsRejectedKind(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	svc, err := jobs.NewService(pool, jobs.Config{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	metrics := telemetry.NewMetrics(reg, telemetry.Labels{Kinds: []string{"build", "deploy"}})
	srv := httptest.NewServer(api.New(api.Config{
		Store: svc.Store(), Accept: svc.GroupCommit().EventAccept,
		Kinds:           converge.KindPolicies{"build": {Name: "build", MaxAttempts: 5}, "deploy": {Name: "deploy", MaxAttempts: 3}},
		MaxPayloadBytes: evMaxPayload, AdminToken: evAdminToken, Logger: logger, Registry: reg, Metrics: metrics,
	}))
	t.Cleanup(srv.Close)
	s := &evStack{url: srv.URL, pool: pool, store: svc.Store(), srv: srv}

	big := `"` + strings.Repeat("a", evMaxPayload) + `"`
	for _, c := range []struct {
		body, contentType string
		status            int
	}{
		{`{"kind":"build","resource":"a","version":0}`, "", http.StatusUnprocessableEntity},
		{`{"kind":"build","version":1}`, "", http.StatusUnprocessableEntity},
		{`{"kind":"build","resource":"a","version":1,"extra":true}`, "", http.StatusUnprocessableEntity},
		{`{"kind":"build","resource":5,"version":1}`, "", http.StatusUnprocessableEntity},
		{`{"kind":"deploy","resource":"a","version":"1"}`, "", http.StatusUnprocessableEntity},
		{`{"kind":"deploy","resource":"a","version":1,"payload":{"x":` + big + `}}`, "", http.StatusRequestEntityTooLarge},
		{`{"kind":"nope","resource":"a","version":0}`, "", http.StatusUnprocessableEntity},
		{`{"resource":"a","version":1}`, "", http.StatusUnprocessableEntity},
		{`[]`, "", http.StatusUnprocessableEntity},
		{`{"kind":"build","resource":"a"`, "", http.StatusBadRequest},
		{`{"kind":"build","resource":"a","version":1} x`, "", http.StatusBadRequest},
		{`{"kind":"build","resource":"a","version":1}`, "text/plain", http.StatusUnsupportedMediaType},
		// Refused by the text check (SPEC §4): still the kind the body names.
		{`{"kind":"build","resource":"a\udc00","version":1}`, "", http.StatusUnprocessableEntity},
		{`{"kind":"deploy","resource":"a","version":1,"payload":{"x":"` + "\xff" + `"}}`, "", http.StatusUnprocessableEntity},
		// ... unless the kind itself is the bad text.
		{`{"kind":"build\u0000","resource":"a","version":1}`, "", http.StatusUnprocessableEntity},
		{`{"kind":"build` + "\xff" + `","resource":"a","version":1}`, "", http.StatusUnprocessableEntity},
		{`{"kind":"build\ud800","resource":"a","version":1}`, "", http.StatusUnprocessableEntity},
		{`{"kind":"build","resource":"a","version":1,"payload":{"x":"` + strings.Repeat("a", evMaxPayload+20<<10) + `"}}`, "", http.StatusRequestEntityTooLarge},
	} {
		ct := c.contentType
		if ct == "" {
			ct = "application/json"
		}
		r := s.do(t, http.MethodPost, "/v1/events", strings.NewReader(c.body), map[string]string{"Content-Type": ct})
		if r.status != c.status {
			t.Fatalf("%.80s: status %d, want %d\n%s", c.body, r.status, c.status, r.body)
		}
	}
	// Headers over the limit: refused before the body is read (431).
	r := s.do(t, http.MethodPost, "/v1/events", strings.NewReader(`{"kind":"build","resource":"a","version":1}`),
		map[string]string{"Content-Type": "application/json", "X-Big": strings.Repeat("a", api.MaxHeaderBytes)})
	evWantStatus(t, r, http.StatusRequestHeaderFieldsTooLarge)
	page := s.get(t, "/metrics")
	evWantStatus(t, page, http.StatusOK)
	for _, c := range []struct {
		kind, reason, want string
	}{
		{"unknown", "headers-too-large", "1"},
		{"build", "headers-too-large", "0"},
		{"build", "invalid-request", "5"},
		{"deploy", "invalid-request", "2"},
		{"deploy", "payload-too-large", "1"},
		{"unknown", "invalid-request", "6"},
		{"unknown", "malformed-json", "2"},
		{"unknown", "unsupported-media-type", "1"},
		{"unknown", "payload-too-large", "1"},
		{"build", "malformed-json", "0"},
		{"build", "unsupported-media-type", "0"},
		{"build", "payload-too-large", "0"},
	} {
		series := `converge_events_rejected_total{kind="` + c.kind + `",reason="` + c.reason + `"}`
		if got := metricValue(page.body, series); got != c.want {
			t.Errorf("%s = %q, want %s", series, got, c.want)
		}
	}
}

// metricValue is the value of series in a Prometheus text page, "" when
// the page has no such series.
func metricValue(page []byte, series string) string {
	sc := bufio.NewScanner(bytes.NewReader(page))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			return v
		}
	}
	return ""
}
