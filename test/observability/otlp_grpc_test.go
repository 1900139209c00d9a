package observability

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/converge-run/converge/test/cvproc"
	"github.com/converge-run/converge/test/pgtest"
	"github.com/converge-run/converge/test/testkit"
)

// otlpGRPCService is the trace service of an OTLP/gRPC receiver on
// loopback: what a collector's or Jaeger's port 4317 is to converge. It
// keeps the spans in an otlpReceiver, as the OTLP/HTTP one does.
type otlpGRPCService struct {
	coltracepb.UnimplementedTraceServiceServer
	rc *otlpReceiver
}

// Export implements coltracepb.TraceServiceServer.
func (s *otlpGRPCService) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	if msg := s.rc.keep(req); msg != "" {
		s.rc.mu.Lock()
		s.rc.bad = append(s.rc.bad, msg)
		s.rc.mu.Unlock()
		return nil, status.Error(codes.InvalidArgument, msg)
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// newOTLPGRPCReceiver starts an OTLP/gRPC trace receiver and returns it
// with the value of OTEL_EXPORTER_OTLP_ENDPOINT that reaches it.
func newOTLPGRPCReceiver(t *testing.T) (*otlpReceiver, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rc := &otlpReceiver{}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, &otlpGRPCService{rc: rc})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return rc, "http://" + lis.Addr().String()
}

// TestTracingGRPC: with OTEL_EXPORTER_OTLP_PROTOCOL=grpc (the standard
// variable) converge exports its spans with OTLP/gRPC to the endpoint, an
// independent receiver built on the OTLP protocol's own gRPC service
// definition: the accept's span in the caller's trace, the attempt's under
// it, and the call's client span, whose traceparent the target got.
func TestTracingGRPC(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	rc, endpoint := newOTLPGRPCReceiver(t)
	target := newTracedTarget(t)
	cfg := testkit.ConfigFile(t, fmt.Sprintf(`listen: 127.0.0.1:0
database_url: %s
river: {fetch_poll_interval: 20ms}
kinds:
  build:
    target: {http: {url: %s/build, timeout: 10s}}
    debounce: 0s
`, db, target.srv.URL))
	proc := cvproc.Start(t, cvproc.Options{Name: "serve", Args: []string{"serve", "--config", cfg},
		Env: cvproc.Env("CONVERGE_ADMIN_TOKEN="+traceToken, "OTEL_EXPORTER_OTLP_PROTOCOL=grpc",
			"OTEL_EXPORTER_OTLP_ENDPOINT="+endpoint, "OTEL_BSP_SCHEDULE_DELAY=100")})
	if got := proc.LogLine(t, "tracing on: exporting spans with OTLP", 60*time.Second)["protocol"]; got != "grpc" {
		t.Errorf("start-up logged protocol %v, want grpc", got)
	}
	base := proc.URL(t, 60*time.Second)
	cvproc.WaitHTTP(t, base+"/healthz", 10*time.Second)

	var acc struct {
		Run struct {
			ID string `json:"id"`
		} `json:"run"`
	}
	if got := apiCall(t, http.MethodPost, base+"/v1/events", "00-"+submitTrace+"-"+submitParent+"-01",
		map[string]any{"kind": "build", "resource": "app/grpc", "version": 1}, &acc); got != http.StatusAccepted {
		t.Fatalf("submit: %d", got)
	}
	var spans []otlpSpan
	testkit.Eventually(t, 30*time.Second, func() (bool, string) {
		spans, _ = rc.snapshot()
		return len(find(spans, "converge.accept", "converge.run_id", acc.Run.ID)) == 1 &&
				len(find(spans, "converge.attempt", "converge.run_id", acc.Run.ID)) == 1 &&
				len(find(spans, "converge.http", "", "")) == 1,
			fmt.Sprintf("%d spans over gRPC", len(spans))
	})
	if _, bad := rc.snapshot(); len(bad) > 0 {
		t.Errorf("bad exports: %q", bad)
	}
	accept := find(spans, "converge.accept", "converge.run_id", acc.Run.ID)[0]
	attempt := find(spans, "converge.attempt", "converge.run_id", acc.Run.ID)[0]
	call := find(spans, "converge.http", "", "")[0]
	// The accept's parent is the server span of POST /v1/events, a child of
	// the request's traceparent.
	var server *otlpSpan
	for i, s := range spans {
		if s.spanID == accept.parentID {
			server = &spans[i]
		}
	}
	if accept.traceID != submitTrace || server == nil || server.parentID != submitParent {
		t.Errorf("accept span in trace %s under %+v, want trace %s under the request's server span, a child of %s",
			accept.traceID, server, submitTrace, submitParent)
	}
	if attempt.traceID != submitTrace || call.traceID != submitTrace || call.parentID != attempt.spanID {
		t.Errorf("attempt span %s/%s, call span %s under %s: want both in trace %s, the call under the attempt",
			attempt.traceID, attempt.spanID, call.traceID, call.parentID, submitTrace)
	}
	calls := target.of("app/grpc")
	if len(calls) != 1 || traceIDOf(calls[0]) != submitTrace || spanIDOf(calls[0]) != call.spanID {
		t.Errorf("the target's traceparents %q, want one of trace %s from span %s", calls, submitTrace, call.spanID)
	}
}
