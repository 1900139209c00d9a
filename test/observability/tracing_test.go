package observability

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/converge-run/converge/test/cvproc"
	"github.com/converge-run/converge/test/pgtest"
	"github.com/converge-run/converge/test/testkit"
)

// traceToken is the admin token of the tracing test's processes.
const traceToken = "observability-trace-admin-token-0123456789"

// Trace contexts the test's requests send (W3C traceparent), as a client
// already inside a trace would.
const (
	submitTrace   = "4bf92f3577b34da6a3ce929d0e0e4736"
	submitParent  = "00f067aa0ba902b7"
	redriveTrace  = "5ce0e9a56015fec5aadfa328ae398115"
	workflowTrace = "6de1f0b67126afd6bbe0b439bf4a9226"
	cliTrace      = "7ef201c78237b0e7ccf1c54ac05b3337"
	redriveSpan   = "0102030405060708"
)

// tracedTarget is the HTTP target of the test: it records the traceparent
// of every call by resource, and answers 503 to the first call of
// app/retry (a transient error, so that its run is retried) and 400 to
// every call of kind fail (a permanent error: a dead letter).
type tracedTarget struct {
	srv *httptest.Server

	mu    sync.Mutex
	calls map[string][]string // resource -> traceparents, in order
}

func newTracedTarget(t *testing.T) *tracedTarget {
	tt := &tracedTarget{calls: map[string][]string{}}
	tt.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Resource string `json:"resource"`
		}
		_ = json.NewDecoder(r.Body).Decode(&body)
		tt.mu.Lock()
		tt.calls[body.Resource] = append(tt.calls[body.Resource], r.Header.Get("traceparent"))
		n := len(tt.calls[body.Resource])
		tt.mu.Unlock()
		switch {
		case strings.HasSuffix(r.URL.Path, "/fail"):
			http.Error(w, "refused", http.StatusBadRequest)
		case body.Resource == "app/retry" && n == 1:
			http.Error(w, "busy", http.StatusServiceUnavailable)
		default:
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"ok":true}`)
		}
	}))
	t.Cleanup(tt.srv.Close)
	return tt
}

func (tt *tracedTarget) of(resource string) []string {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	return append([]string(nil), tt.calls[resource]...)
}

// traceIDOf is the trace id of a traceparent, "" when it is not one.
func traceIDOf(tp string) string {
	parts := strings.Split(tp, "-")
	if len(parts) != 4 || len(parts[1]) != 32 {
		return ""
	}
	return parts[1]
}

// spanIDOf is the parent span id of a traceparent.
func spanIDOf(tp string) string {
	parts := strings.Split(tp, "-")
	if len(parts) != 4 {
		return ""
	}
	return parts[2]
}

// apiCall sends an authenticated JSON request to base and decodes the
// answer into out (when not nil); traceparent, when set, is sent too.
func apiCall(t *testing.T, method, url, traceparent string, body, out any) int {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+traceToken)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if traceparent != "" {
		req.Header.Set("traceparent", traceparent)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	data, _ := io.ReadAll(resp.Body)
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: %d %s: %v", method, url, resp.StatusCode, data, err)
		}
	}
	return resp.StatusCode
}

// dashboardClient signs in to the dashboard at base with token
// and returns a function that GETs a page and returns it (failing unless
// 200).
func dashboardClient(t *testing.T, base, token string) func(t *testing.T, path string) string {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/ui/sign-in",
		strings.NewReader(url.Values{"token": {token}}.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("dashboard sign-in: %d", resp.StatusCode)
	}
	return func(t *testing.T, path string) string {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
		}
		return string(b)
	}
}

// eventRuns is the part of GET /v1/events/{id} this test reads.
type eventRuns struct {
	ID   string `json:"id"`
	Runs []struct {
		ID       string  `json:"id"`
		Number   int     `json:"number"`
		Status   string  `json:"status"`
		Attempts int     `json:"attempts"`
		TraceID  *string `json:"trace_id"`
	} `json:"runs"`
}

// TestTracing runs converge as three processes of the real binary (an
// `api` and two `worker`s, one after the other) with
// OTEL_EXPORTER_OTLP_ENDPOINT pointing at an OTLP receiver of the test,
// and follows events through the traces they export:
//   - the accept span is a child of the traceparent the request sent;
//   - each attempt span is a child of the accept span, the second
//     attempt of a retried run in another worker process too;
//   - the HTTP target received a traceparent of that trace (the call's
//     converge.http span, a client span under the attempt's with the
//     call's HTTP attributes), an exec target TRACEPARENT (its
//     converge.exec span's);
//   - the API's run trace_id is that trace's id;
//   - a redriven run belongs to the redrive request's trace, and its
//     redrive and attempt spans link to the failed run's accept;
//   - the log lines of the accept and the attempts carry event_id, run_id
//     and trace_id.
func TestTracing(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	rc := newOTLPReceiver(t)
	target := newTracedTarget(t)
	dir := t.TempDir()
	execOut := filepath.Join(dir, "traceparent.txt")
	script := filepath.Join(dir, "deploy.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nprintf '%s\\n' \"$TRACEPARENT\" >> "+execOut+"\nprintf '{}'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := testkit.ConfigFile(t, fmt.Sprintf(`listen: 127.0.0.1:0
database_url: %s
log_level: debug
river: {fetch_poll_interval: 20ms}
ui: {trace_url: 'http://127.0.0.1:16686/trace/{trace_id}'}
kinds:
  build:
    target: {http: {url: %s/build, timeout: 10s}}
    backoff: {initial: 2s, max: 2s}
    max_attempts: 3
  deploy:
    target: {exec: {command: [%s], timeout: 10s}}
  fail:
    target: {http: {url: %s/fail, timeout: 10s}}
    max_attempts: 1
  ship:
    target: {http: {url: %s/ship, timeout: 10s}}
workflows:
  release:
    steps:
      build: {kind: build, resource: "wf/{resource}"}
      ship:  {kind: ship, resource: "ship/{resource}", needs: [build]}
`, db, target.srv.URL, script, target.srv.URL, target.srv.URL))
	env := func(instance string) []string {
		return cvproc.Env("CONVERGE_ADMIN_TOKEN="+traceToken, "CONVERGE_LISTEN=127.0.0.1:0",
			"OTEL_EXPORTER_OTLP_ENDPOINT="+rc.URL(), "OTEL_BSP_SCHEDULE_DELAY=100",
			"OTEL_RESOURCE_ATTRIBUTES=service.instance.id="+instance)
	}
	apiProc := cvproc.Start(t, cvproc.Options{Name: "api", Args: []string{"api", "--config", cfg}, Env: env("api")})
	base := apiProc.URL(t, 60*time.Second)
	cvproc.WaitHTTP(t, base+"/healthz", 10*time.Second)
	worker1 := cvproc.Start(t, cvproc.Options{Name: "worker-1", Args: []string{"worker", "--config", cfg}, Env: env("worker-1")})
	worker1.LogLine(t, "workers started", 60*time.Second)

	// 1. An event whose first attempt fails transiently, sent inside a
	// trace of the caller's.
	var acc struct {
		Event struct {
			ID string `json:"id"`
		} `json:"event"`
		Run struct {
			ID      string  `json:"id"`
			TraceID *string `json:"trace_id"`
		} `json:"run"`
	}
	if got := apiCall(t, http.MethodPost, base+"/v1/events", "00-"+submitTrace+"-"+submitParent+"-01",
		map[string]any{"kind": "build", "resource": "app/retry", "version": 1, "payload": map[string]any{}}, &acc); got != http.StatusAccepted {
		t.Fatalf("submit: %d", got)
	}
	if acc.Run.TraceID == nil || *acc.Run.TraceID != submitTrace {
		t.Errorf("the accepted run's trace_id = %v, want the request's trace %s", acc.Run.TraceID, submitTrace)
	}
	// Its first attempt, in worker-1, fails; worker-1 stops during the
	// backoff, and worker-2 makes the second attempt.
	var ev eventRuns
	testkit.Eventually(t, 30*time.Second, func() (bool, string) {
		apiCall(t, http.MethodGet, base+"/v1/events/"+acc.Event.ID, "", nil, &ev)
		return len(ev.Runs) == 1 && ev.Runs[0].Status == "retrying", fmt.Sprintf("runs %+v", ev.Runs)
	})
	worker1.Stop()
	worker2 := cvproc.Start(t, cvproc.Options{Name: "worker-2", Args: []string{"worker", "--config", cfg}, Env: env("worker-2")})
	testkit.Eventually(t, 30*time.Second, func() (bool, string) {
		apiCall(t, http.MethodGet, base+"/v1/events/"+acc.Event.ID, "", nil, &ev)
		return len(ev.Runs) == 1 && ev.Runs[0].Status == "succeeded", fmt.Sprintf("runs %+v", ev.Runs)
	})
	if tid := ev.Runs[0].TraceID; tid == nil || *tid != submitTrace {
		t.Errorf("GET /v1/events/{id}: run trace_id = %v, want %s", tid, submitTrace)
	}

	// 2. An exec target's event, without a traceparent: a trace of its own.
	var execAcc struct {
		Event struct {
			ID string `json:"id"`
		} `json:"event"`
		Run struct {
			TraceID *string `json:"trace_id"`
		} `json:"run"`
	}
	if got := apiCall(t, http.MethodPost, base+"/v1/events", "",
		map[string]any{"kind": "deploy", "resource": "app/exec", "version": 1}, &execAcc); got != http.StatusAccepted {
		t.Fatalf("submit deploy: %d", got)
	}
	if execAcc.Run.TraceID == nil || len(*execAcc.Run.TraceID) != 32 || *execAcc.Run.TraceID == submitTrace {
		t.Fatalf("deploy run trace_id = %v, want a new trace", execAcc.Run.TraceID)
	}
	var execLines []string
	testkit.Eventually(t, 30*time.Second, func() (bool, string) {
		b, _ := os.ReadFile(execOut)
		execLines = strings.Fields(string(b))
		return len(execLines) == 1, fmt.Sprintf("exec target saw TRACEPARENT %q", execLines)
	})
	if got := traceIDOf(execLines[0]); got != *execAcc.Run.TraceID {
		t.Errorf("exec target TRACEPARENT %q, want trace %s", execLines[0], *execAcc.Run.TraceID)
	}

	// 3. A permanent failure, redriven inside another trace.
	var failAcc struct {
		Event struct {
			ID string `json:"id"`
		} `json:"event"`
		Run struct {
			ID      string  `json:"id"`
			TraceID *string `json:"trace_id"`
		} `json:"run"`
	}
	if got := apiCall(t, http.MethodPost, base+"/v1/events", "",
		map[string]any{"kind": "fail", "resource": "app/fail", "version": 1}, &failAcc); got != http.StatusAccepted {
		t.Fatalf("submit fail: %d", got)
	}
	var dls struct {
		Items []struct {
			ID    string `json:"id"`
			RunID string `json:"run_id"`
		} `json:"items"`
	}
	testkit.Eventually(t, 30*time.Second, func() (bool, string) {
		apiCall(t, http.MethodGet, base+"/v1/dead-letters?kind=fail", "", nil, &dls)
		return len(dls.Items) == 1, fmt.Sprintf("dead letters %+v", dls.Items)
	})
	var redriven struct {
		Run struct {
			ID      string  `json:"id"`
			Number  int     `json:"number"`
			TraceID *string `json:"trace_id"`
		} `json:"run"`
	}
	if got := apiCall(t, http.MethodPost, base+"/v1/dead-letters/"+dls.Items[0].ID+"/redrive", "00-"+redriveTrace+"-"+redriveSpan+"-01",
		map[string]any{"reason": "tracing test"}, &redriven); got != http.StatusAccepted {
		t.Fatalf("redrive: %d", got)
	}
	if redriven.Run.TraceID == nil || *redriven.Run.TraceID != redriveTrace {
		t.Errorf("redriven run trace_id = %v, want the redrive request's trace %s", redriven.Run.TraceID, redriveTrace)
	}
	testkit.Eventually(t, 30*time.Second, func() (bool, string) {
		return len(target.of("app/fail")) == 2, fmt.Sprintf("calls of app/fail: %d", len(target.of("app/fail")))
	})
	testkit.Eventually(t, 30*time.Second, func() (bool, string) {
		apiCall(t, http.MethodGet, base+"/v1/dead-letters?kind=fail&status=open", "", nil, &dls)
		return len(dls.Items) == 1 && dls.Items[0].RunID == redriven.Run.ID, fmt.Sprintf("open dead letters %+v", dls.Items)
	})

	// 4. A workflow run started inside a trace: both steps' runs (the
	// root accepted at the start, in the api process; the second when
	// the first succeeded, in the worker's finish transaction) keep the
	// start's context, so the workflow run is one trace.
	var wf struct {
		WorkflowRun struct {
			ID      string  `json:"id"`
			Status  string  `json:"status"`
			TraceID *string `json:"trace_id"`
			Steps   []struct {
				Name    string  `json:"name"`
				EventID *string `json:"event_id"`
				RunID   *string `json:"run_id"`
			} `json:"steps"`
		} `json:"workflow_run"`
	}
	if got := apiCall(t, http.MethodPost, base+"/v1/workflow-runs", "00-"+workflowTrace+"-"+submitParent+"-01",
		map[string]any{"workflow": "release", "resource": "app", "version": 1}, &wf); got != http.StatusAccepted {
		t.Fatalf("start workflow run: %d", got)
	}
	testkit.Eventually(t, 30*time.Second, func() (bool, string) {
		apiCall(t, http.MethodGet, base+"/v1/workflow-runs/"+wf.WorkflowRun.ID, "", nil, &wf.WorkflowRun)
		return wf.WorkflowRun.Status == "succeeded", "workflow run " + wf.WorkflowRun.Status
	})
	if tid := wf.WorkflowRun.TraceID; tid == nil || *tid != workflowTrace {
		t.Errorf("GET /v1/workflow-runs/{id}: trace_id = %v, want %s", tid, workflowTrace)
	}
	stepRuns := map[string]string{}
	for _, st := range wf.WorkflowRun.Steps {
		if st.EventID == nil || st.RunID == nil {
			t.Fatalf("step %s has no event or run", st.Name)
		}
		var sev eventRuns
		apiCall(t, http.MethodGet, base+"/v1/events/"+*st.EventID, "", nil, &sev)
		if len(sev.Runs) != 1 || sev.Runs[0].TraceID == nil || *sev.Runs[0].TraceID != workflowTrace {
			t.Errorf("step %s: runs %+v, want one in the workflow run's trace %s", st.Name, sev.Runs, workflowTrace)
		}
		stepRuns[st.Name] = *st.RunID
	}
	if tp := target.of("ship/app"); len(tp) != 1 || traceIDOf(tp[0]) != workflowTrace {
		t.Errorf("the ship step's call carried %q, want trace %s", tp, workflowTrace)
	}

	// 5. `converge submit` inside a traced step (TRACEPARENT in its
	// environment, as an exec target gets it) sends it along: the run
	// joins that trace, and the table shows it.
	cli := exec.CommandContext(t.Context(), cvproc.Build(t), "submit", "--url", base, "--token", traceToken,
		"--kind", "ship", "--resource", "cli/app", "--version", "1")
	cli.Env = cvproc.Env("TRACEPARENT=00-" + cliTrace + "-" + submitParent + "-01")
	out, err := cli.CombinedOutput()
	if err != nil {
		t.Fatalf("converge submit: %v\n%s", err, out)
	}
	if lines := strings.Split(strings.TrimSpace(string(out)), "\n"); len(lines) != 2 || !strings.HasSuffix(lines[0], "TRACE") ||
		!strings.HasSuffix(strings.TrimSpace(lines[1]), cliTrace) {
		t.Errorf("converge submit printed\n%s\nwant a TRACE column with %s", out, cliTrace)
	}

	// The dashboard shows each run's trace id as a link to the trace
	// viewer (ui.trace_url): the event page and the dead letter page.
	dash := dashboardClient(t, base, traceToken)
	page := dash(t, "/ui/events/"+acc.Event.ID)
	if want := `href="http://127.0.0.1:16686/trace/` + submitTrace + `"`; !strings.Contains(page, want) {
		t.Errorf("the event page has no %s:\n%s", want, page)
	}
	page = dash(t, "/ui/workflow-runs/"+wf.WorkflowRun.ID)
	if want := `href="http://127.0.0.1:16686/trace/` + workflowTrace + `"`; !strings.Contains(page, want) {
		t.Errorf("the workflow run page has no %s", want)
	}
	page = dash(t, "/ui/dead-letters/"+dls.Items[0].ID)
	if want := `href="http://127.0.0.1:16686/trace/` + redriveTrace + `"`; !strings.Contains(page, want) {
		t.Errorf("the dead letter page of the redriven run has no %s:\n%s", want, page)
	}

	// Every process stops gracefully and flushes its spans.
	worker2.Stop()
	apiProc.Stop()
	spans, bad := rc.snapshot()
	if len(bad) > 0 {
		t.Errorf("the receiver refused exports: %v", bad)
	}
	if len(spans) == 0 {
		t.Fatal("no spans received")
	}

	// The retried run: accept -> attempt 1 (worker-1), attempt 2 (worker-2).
	accepts := find(spans, "converge.accept", "converge.run_id", acc.Run.ID)
	if len(accepts) != 1 {
		t.Fatalf("accept spans of run %s: %d, want 1", acc.Run.ID, len(accepts))
	}
	accept := accepts[0]
	if accept.traceID != submitTrace || accept.instance != "api" {
		t.Errorf("accept span: trace %s from %q, want trace %s from api", accept.traceID, accept.instance, submitTrace)
	}
	if accept.attrs["converge.event_id"] != acc.Event.ID || accept.attrs["converge.kind"] != "build" {
		t.Errorf("accept span attributes %v", accept.attrs)
	}
	// Its parent is the server span of POST /v1/events, a child of the
	// request's traceparent.
	var server *otlpSpan
	for i, s := range spans {
		if s.spanID == accept.parentID {
			server = &spans[i]
		}
	}
	if server == nil || server.parentID != submitParent || server.traceID != submitTrace {
		t.Errorf("the accept span's parent %s is not the server span of the request (a child of %s): %+v", accept.parentID, submitParent, server)
	}
	attempts := find(spans, "converge.attempt", "converge.run_id", acc.Run.ID)
	if len(attempts) != 2 {
		t.Fatalf("attempt spans of run %s: %d, want 2", acc.Run.ID, len(attempts))
	}
	byAttempt := map[string]otlpSpan{}
	for _, a := range attempts {
		byAttempt[a.attrs["converge.attempt"]] = a
		if a.traceID != submitTrace || a.parentID != accept.spanID {
			t.Errorf("attempt %s span: trace %s parent %s, want trace %s parent %s (the accept)",
				a.attrs["converge.attempt"], a.traceID, a.parentID, submitTrace, accept.spanID)
		}
	}
	if a := byAttempt["1"]; a.instance != "worker-1" || a.attrs["converge.outcome"] != "transient_error" || a.attrs["converge.status"] != "retrying" {
		t.Errorf("attempt 1 span from %q with %v, want worker-1, transient_error, retrying", a.instance, a.attrs)
	}
	if a := byAttempt["2"]; a.instance != "worker-2" || a.attrs["converge.outcome"] != "succeeded" {
		t.Errorf("attempt 2 span from %q with %v, want worker-2, succeeded", a.instance, a.attrs)
	}
	// The target got a traceparent of the trace in each call: that of the
	// call's converge.http span, a client span under the attempt's (an
	// internal span) with the call's HTTP attributes (its URL without the
	// query) and an error status for the 503.
	calls := target.of("app/retry")
	if len(calls) != 2 {
		t.Fatalf("target calls of app/retry: %d, want 2", len(calls))
	}
	httpSpans := map[string]otlpSpan{}
	for _, s := range find(spans, "converge.http", "", "") {
		httpSpans[s.spanID] = s
	}
	for i, tp := range calls {
		if traceIDOf(tp) != submitTrace {
			t.Errorf("call %d: traceparent %q, want trace %s", i+1, tp, submitTrace)
			continue
		}
		a := byAttempt[fmt.Sprint(i+1)]
		if a.kind != tracepb.Span_SPAN_KIND_INTERNAL || a.attrs["http.request.method"] != "" {
			t.Errorf("attempt %d span: kind %v, attributes %v; want an internal span without the call's attributes", i+1, a.kind, a.attrs)
		}
		h, ok := httpSpans[spanIDOf(tp)]
		wantStatus := []tracepb.Status_StatusCode{tracepb.Status_STATUS_CODE_ERROR, tracepb.Status_STATUS_CODE_UNSET}[i]
		if !ok || h.parentID != a.spanID || h.traceID != submitTrace || h.kind != tracepb.Span_SPAN_KIND_CLIENT || h.instance != a.instance ||
			h.attrs["http.request.method"] != "POST" || h.attrs["url.full"] != target.srv.URL+"/build" ||
			h.attrs["http.response.status_code"] != []string{"503", "200"}[i] || h.status != wantStatus {
			t.Errorf("call %d: the traceparent's span %s is not a converge.http client span under attempt %d's %s with the call's attributes and status %v: %+v",
				i+1, spanIDOf(tp), i+1, a.spanID, wantStatus, h)
		}
	}

	// The exec target's trace: accept and attempt, and an exec span whose
	// context the command got.
	execTrace := *execAcc.Run.TraceID
	execAttempts := find(spans, "converge.attempt", "converge.event_id", execAcc.Event.ID)
	if len(execAttempts) != 1 || execAttempts[0].traceID != execTrace {
		t.Errorf("exec attempt spans %+v, want one in trace %s", execAttempts, execTrace)
	}
	if ex := find(spans, "converge.exec", "", ""); len(ex) != 1 || ex[0].spanID != spanIDOf(execLines[0]) || len(execAttempts) == 1 && ex[0].parentID != execAttempts[0].spanID {
		t.Errorf("exec spans %+v, want one with the span id of TRACEPARENT %s under the attempt", ex, execLines[0])
	}

	// The redrive: its span in the redrive request's trace, linked to the
	// failed run's accept; the new run's attempt a child of it, linked too.
	failAccept := find(spans, "converge.accept", "converge.run_id", failAcc.Run.ID)
	redrives := find(spans, "converge.redrive", "converge.run_id", redriven.Run.ID)
	if len(failAccept) != 1 || len(redrives) != 1 {
		t.Fatalf("accept spans of the failed run %d, redrive spans %d; want 1 and 1", len(failAccept), len(redrives))
	}
	link := failAccept[0].traceID + "-" + failAccept[0].spanID
	if r := redrives[0]; r.traceID != redriveTrace || strings.Join(r.links, ",") != link {
		t.Errorf("redrive span: trace %s links %v, want trace %s linking to %s", r.traceID, r.links, redriveTrace, link)
	}
	redriveAttempts := find(spans, "converge.attempt", "converge.run_id", redriven.Run.ID)
	if len(redriveAttempts) != 1 {
		t.Fatalf("attempt spans of the redriven run: %d, want 1", len(redriveAttempts))
	}
	if a := redriveAttempts[0]; a.traceID != redriveTrace || a.parentID != redrives[0].spanID || strings.Join(a.links, ",") != link {
		t.Errorf("redriven attempt span: trace %s parent %s links %v; want trace %s, parent %s, link %s",
			a.traceID, a.parentID, a.links, redriveTrace, redrives[0].spanID, link)
	}
	if tp := target.of("app/fail"); traceIDOf(tp[1]) != redriveTrace {
		t.Errorf("the redriven run's call carried traceparent %q, want trace %s", tp[1], redriveTrace)
	}

	// The workflow run's trace: its start span, and under it every step's
	// attempt.
	starts := find(spans, "converge.workflow_run.start", "converge.workflow_run_id", wf.WorkflowRun.ID)
	if len(starts) != 1 || starts[0].traceID != workflowTrace {
		t.Fatalf("workflow run start spans %+v, want one in trace %s", starts, workflowTrace)
	}
	for name, runID := range stepRuns {
		a := find(spans, "converge.attempt", "converge.run_id", runID)
		if len(a) != 1 || a[0].traceID != workflowTrace || a[0].parentID != starts[0].spanID {
			t.Errorf("step %s attempt spans %+v, want one in trace %s under the start span %s", name, a, workflowTrace, starts[0].spanID)
		}
	}

	// Log lines: the accept (api) and the attempts (workers) carry
	// event_id, run_id and trace_id.
	checkLog := func(p *cvproc.Process, msg string) {
		t.Helper()
		for line := range strings.SplitSeq(p.Stderr(), "\n") {
			var rec map[string]any
			if json.Unmarshal([]byte(line), &rec) != nil || rec["msg"] != msg || rec["run_id"] != acc.Run.ID {
				continue
			}
			if rec["event_id"] != acc.Event.ID || rec["trace_id"] != submitTrace {
				t.Errorf("%s log %q: %s, want event_id %s and trace_id %s", p.Name(), msg, line, acc.Event.ID, submitTrace)
			}
			return
		}
		t.Errorf("%s logged no %q for run %s", p.Name(), msg, acc.Run.ID)
	}
	checkLog(apiProc, "event accepted")
	checkLog(worker1, "attempt started")
	checkLog(worker1, "attempt failed")
	checkLog(worker2, "attempt succeeded")
}
