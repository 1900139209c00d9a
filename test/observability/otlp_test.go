package observability

import (
	"compress/gzip"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// otlpSpan is a span an OTLP receiver got, with the attributes this test
// reads as strings.
type otlpSpan struct {
	name                      string
	kind                      tracepb.Span_SpanKind
	status                    tracepb.Status_StatusCode
	traceID, spanID, parentID string
	attrs                     map[string]string
	// instance is the service.instance.id of the process that sent it.
	instance string
	// links are the span contexts (trace id-span id) the span links to.
	links []string
}

// otlpReceiver is an OTLP/HTTP trace receiver on loopback: what a
// collector or Jaeger's port 4318 is to converge. It decodes every export
// (protobuf, gzipped or not) and keeps the spans.
type otlpReceiver struct {
	srv *httptest.Server

	mu      sync.Mutex
	spans   []otlpSpan
	exports int
	bad     []string
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	rc := &otlpReceiver{}
	rc.srv = httptest.NewServer(http.HandlerFunc(rc.serve))
	t.Cleanup(rc.srv.Close)
	return rc
}

// URL is the value of OTEL_EXPORTER_OTLP_ENDPOINT for the receiver.
func (rc *otlpReceiver) URL() string { return rc.srv.URL }

func (rc *otlpReceiver) serve(w http.ResponseWriter, r *http.Request) {
	fail := func(msg string) {
		rc.mu.Lock()
		rc.bad = append(rc.bad, msg)
		rc.mu.Unlock()
		http.Error(w, msg, http.StatusBadRequest)
	}
	if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" {
		fail(r.Method + " " + r.URL.Path + ": not an OTLP trace export")
		return
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/x-protobuf" {
		fail("Content-Type " + ct)
		return
	}
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			fail("gzip: " + err.Error())
			return
		}
		body = zr
	}
	data, err := io.ReadAll(body)
	if err != nil {
		fail("read: " + err.Error())
		return
	}
	var req coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(data, &req); err != nil {
		fail("decode: " + err.Error())
		return
	}
	if msg := rc.keep(&req); msg != "" {
		fail(msg)
		return
	}
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// keep records the spans of an export, or says what is wrong with it.
func (rc *otlpReceiver) keep(req *coltracepb.ExportTraceServiceRequest) string {
	var got []otlpSpan
	for _, rs := range req.GetResourceSpans() {
		res := attrMap(rs.GetResource().GetAttributes())
		if res["service.name"] != "converge" {
			return "service.name " + res["service.name"]
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				sp := otlpSpan{name: s.GetName(), kind: s.GetKind(), status: s.GetStatus().GetCode(), traceID: hex.EncodeToString(s.GetTraceId()), spanID: hex.EncodeToString(s.GetSpanId()),
					parentID: hex.EncodeToString(s.GetParentSpanId()), attrs: attrMap(s.GetAttributes()), instance: res["service.instance.id"]}
				for _, l := range s.GetLinks() {
					sp.links = append(sp.links, hex.EncodeToString(l.GetTraceId())+"-"+hex.EncodeToString(l.GetSpanId()))
				}
				got = append(got, sp)
			}
		}
	}
	rc.mu.Lock()
	rc.spans = append(rc.spans, got...)
	rc.exports++
	rc.mu.Unlock()
	return ""
}

// attrMap renders OTLP attributes as strings (ints in decimal).
func attrMap(kvs []*commonpb.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		v := kv.GetValue()
		switch x := v.GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.GetKey()] = x.StringValue
		case *commonpb.AnyValue_IntValue:
			m[kv.GetKey()] = strconv.FormatInt(x.IntValue, 10)
		case *commonpb.AnyValue_BoolValue:
			if x.BoolValue {
				m[kv.GetKey()] = "true"
			} else {
				m[kv.GetKey()] = "false"
			}
		default:
			m[kv.GetKey()] = v.String()
		}
	}
	return m
}

// snapshot returns the spans received so far and the bad requests.
func (rc *otlpReceiver) snapshot() ([]otlpSpan, []string) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]otlpSpan(nil), rc.spans...), append([]string(nil), rc.bad...)
}

// find returns the spans named name whose attribute key is value.
func find(spans []otlpSpan, name, key, value string) []otlpSpan {
	var out []otlpSpan
	for _, s := range spans {
		if s.name == name && (key == "" || s.attrs[key] == value) {
			out = append(out, s)
		}
	}
	return out
}
