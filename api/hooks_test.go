package api_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/api"
	"github.com/converge-run/converge/jobs"
	"github.com/converge-run/converge/source"
	"github.com/converge-run/converge/telemetry"
	"github.com/converge-run/converge/test/pgtest"
)

const (
	hookGitHubSecret = "github-test-secret"
	hookStdSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
)

// hookStack is evStack with the sources github, registry (cloudevents)
// and plain (webhook).
func hookStack(t *testing.T) *evStack {
	t.Helper()
	return hookStackLimited(t, 0)
}

// hookStackLimited is hookStack with rate_limit requests a minute (0: off).
func hookStackLimited(t *testing.T, rateLimit int) *evStack {
	t.Helper()
	return hookStackWith(t, rateLimit, hookSources)
}

// hookSources are hookStack's sources.
var hookSources = []converge.SourceDef{
	{Name: "github", Type: converge.SourceGitHub, Secret: hookGitHubSecret, Rules: []converge.SourceRule{
		{When: `headers["x-github-event"] == "push" && body.ref == "refs/heads/main"`, Kind: "build",
			Resource: `body.repository.full_name`, Version: "auto", Payload: `{"sha": body.after}`},
		{When: `headers["x-github-event"] == "release"`, Workflow: "release",
			Resource: `body.repository.full_name`, Version: "auto"},
		{When: `headers["x-github-event"] == "push" && body.ref == "refs/heads/broken"`, Kind: "build",
			Resource: `body.nope`, Version: "1"},
	}},
	{Name: "registry", Type: converge.SourceCloudEvents, Secret: hookStdSecret, Rules: []converge.SourceRule{
		{When: `body.type == "image.pushed"`, Kind: "deploy", Resource: `"staging/" + body.data.repository`,
			Version: `int(body.data.build_number)`},
	}},
}

// hookStackWith is hookStack with the sources defs, rate_limit requests a
// minute (0: off) and max_payload_bytes evMaxPayload.
func hookStackWith(t *testing.T, rateLimit int, defs []converge.SourceDef) *evStack {
	t.Helper()
	pool := pgtest.Pool(t)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	svc, err := jobs.NewService(pool, jobs.Config{Logger: logger})
	if err != nil {
		t.Fatalf("river client: %v", err)
	}
	st := svc.Store()
	kinds := converge.KindPolicies{"build": {Name: "build", MaxAttempts: 5}, "deploy": {Name: "deploy", MaxAttempts: 3}}
	set, err := source.Compile(defs)
	if err != nil {
		t.Fatal(err)
	}
	wfs := evWorkflows(t)
	recv := set.Receiver(source.ReceiverParams{Store: st, Kinds: kinds, Workflows: wfs, MaxPayloadBytes: evMaxPayload, Answer: api.DeliveryAnswerJSON})
	reg := prometheus.NewRegistry()
	var names []string
	for _, d := range defs {
		names = append(names, d.Name)
	}
	metrics := telemetry.NewMetrics(reg, telemetry.Labels{Kinds: []string{"build", "deploy"}, Workflows: []string{"release"}, Sources: names})
	srv := httptest.NewServer(api.New(api.Config{
		Store: st, Kinds: kinds, Workflows: wfs, MaxPayloadBytes: evMaxPayload, AdminToken: evAdminToken,
		Logger: logger, Hooks: recv.Receive, HookSources: names, RateLimit: rateLimit, RateWindow: time.Minute, Registry: reg, Metrics: metrics,
	}))
	t.Cleanup(srv.Close)
	return &evStack{url: srv.URL, pool: pool, store: st, srv: srv}
}

func githubPush(repo, ref, sha string) []byte {
	return fmt.Appendf(nil, `{"ref": %q, "before": "0000", "after": %q, "repository": {"id": 1, "full_name": %q}, "pusher": {"name": "octocat"}}`, ref, sha, repo)
}

// ghPost posts body as GitHub does, signed with secret ("" sends no
// signature).
func ghPost(t *testing.T, s *evStack, event, delivery, secret string, body []byte) *evResponse {
	t.Helper()
	h := map[string]string{"Authorization": "", "Content-Type": "application/json", "X-GitHub-Event": event, "X-GitHub-Delivery": delivery}
	if secret != "" {
		h["X-Hub-Signature-256"] = source.SignGitHub([]byte(secret), body)
	}
	return s.do(t, http.MethodPost, "/hooks/github", bytes.NewReader(body), h)
}

func hookRepo() string { return "octo/" + uuid.NewString()[:8] }

func TestHookGitHubPush(t *testing.T) {
	t.Parallel()
	s := hookStack(t)
	repo := hookRepo()
	body := githubPush(repo, "refs/heads/main", "abc123")

	bad := uuid.NewString()
	for _, secret := range []string{"", "other-secret"} {
		evWantProblem(t, ghPost(t, s, "push", bad, secret, body), http.StatusUnauthorized, "bad-signature")
	}
	tampered := map[string]string{"Authorization": "", "Content-Type": "application/json", "X-GitHub-Event": "push", "X-GitHub-Delivery": bad,
		"X-Hub-Signature-256": source.SignGitHub([]byte(hookGitHubSecret), body)}
	evWantProblem(t, s.do(t, http.MethodPost, "/hooks/github", bytes.NewReader(githubPush(repo, "refs/heads/main", "evil")), tampered),
		http.StatusUnauthorized, "bad-signature")
	if n := hookEvents(t, s, repo); n != 0 || hookDeliveries(t, s, bad) != 0 {
		t.Errorf("a bad signature wrote rows: %d events, %d deliveries", n, hookDeliveries(t, s, bad))
	}

	id := uuid.NewString()
	r := ghPost(t, s, "push", id, hookGitHubSecret, body)
	evWantStatus(t, r, http.StatusAccepted)
	var ans struct {
		Delivery converge.Delivery `json:"delivery"`
		Accepted []struct {
			Rule    int             `json:"rule"`
			Outcome string          `json:"outcome"`
			Event   *converge.Event `json:"event"`
		} `json:"accepted"`
	}
	if err := json.Unmarshal(r.body, &ans); err != nil {
		t.Fatal(err)
	}
	if ans.Delivery.Status != converge.DeliveryAccepted || ans.Delivery.DeliveryID != id || len(ans.Accepted) != 1 {
		t.Fatalf("answer = %s", r.body)
	}
	ev := ans.Accepted[0].Event
	if ans.Accepted[0].Outcome != "accepted" || ev == nil || ev.Kind != "build" || ev.Resource != repo || string(ev.Payload) != `{"sha": "abc123"}` && string(ev.Payload) != `{"sha":"abc123"}` {
		t.Errorf("accepted = %s", r.body)
	}

	// A redelivery is the first answer, and accepts nothing new.
	again := ghPost(t, s, "push", id, hookGitHubSecret, body)
	evWantStatus(t, again, http.StatusOK)
	var ans2 struct {
		Delivery converge.Delivery `json:"delivery"`
	}
	_ = json.Unmarshal(again.body, &ans2)
	if ans2.Delivery.ID != ans.Delivery.ID {
		t.Errorf("redelivery answered delivery %s, want %s", ans2.Delivery.ID, ans.Delivery.ID)
	}
	if n := hookEvents(t, s, repo); n != 1 {
		t.Errorf("%d events of %s, want 1", n, repo)
	}

	// The delivery is listed and readable.
	got := s.get(t, "/v1/deliveries/"+ans.Delivery.ID.String())
	evWantStatus(t, got, http.StatusOK)
	list := s.get(t, "/v1/deliveries?source=github&status=accepted&limit=500")
	evWantStatus(t, list, http.StatusOK)
	if !bytes.Contains(list.body, []byte(ans.Delivery.ID.String())) {
		t.Errorf("the delivery is not listed")
	}
	evWantProblem(t, s.get(t, "/v1/deliveries?status=maybe"), http.StatusUnprocessableEntity, "invalid-request")

	// Not main: no rule matches, ignored.
	ign := ghPost(t, s, "push", uuid.NewString(), hookGitHubSecret, githubPush(repo, "refs/heads/dev", "d"))
	evWantStatus(t, ign, http.StatusAccepted)
	if m := ign.json(t); m["delivery"].(map[string]any)["status"] != "ignored" || len(m["accepted"].([]any)) != 0 {
		t.Errorf("ignored answer = %s", ign.body)
	}

	// A ping is a delivery as any other: no rule matches it, ignored.
	pingID := uuid.NewString()
	ping := ghPost(t, s, "ping", pingID, hookGitHubSecret, []byte(`{"zen": "Keep it logically awesome."}`))
	evWantStatus(t, ping, http.StatusAccepted)
	if m := ping.json(t); m["delivery"].(map[string]any)["status"] != "ignored" || len(m["accepted"].([]any)) != 0 || hookDeliveries(t, s, pingID) != 1 {
		t.Errorf("ping answer = %s, want ignored with its delivery row", ping.body)
	}
	// No X-GitHub-Delivery: 422 naming the header, nothing written.
	noID := ghPost(t, s, "push", "", hookGitHubSecret, body)
	p := evWantProblem(t, noID, http.StatusUnprocessableEntity, "invalid-request")
	if fields := evFields(t, p); len(fields) != 1 || fields[0] != "x-github-delivery" {
		t.Errorf("no delivery id: errors name %v, want [x-github-delivery]", fields)
	}
	// Unknown source.
	evWantProblem(t, s.do(t, http.MethodPost, "/hooks/nope", bytes.NewReader(body), map[string]string{"Authorization": "", "Content-Type": "application/json"}),
		http.StatusNotFound, "not-found")
	// Not JSON.
	evWantProblem(t, s.do(t, http.MethodPost, "/hooks/github", bytes.NewReader(body), map[string]string{"Authorization": "", "Content-Type": "text/plain",
		"X-GitHub-Event": "push", "X-GitHub-Delivery": uuid.NewString(), "X-Hub-Signature-256": source.SignGitHub([]byte(hookGitHubSecret), body)}),
		http.StatusUnsupportedMediaType, "unsupported-media-type")
	// Too large: refused before being read whole.
	big := bytes.Repeat([]byte(" "), evMaxPayload+1)
	evWantProblem(t, ghPost(t, s, "push", uuid.NewString(), hookGitHubSecret, big), http.StatusRequestEntityTooLarge, "payload-too-large")
}

func hookDeliveries(t *testing.T, s *evStack, deliveryID string) int {
	t.Helper()
	var n int
	if err := s.pool.QueryRow(t.Context(), `SELECT count(*) FROM converge_deliveries WHERE delivery_id = $1`, deliveryID).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func hookEvents(t *testing.T, s *evStack, resource string) int {
	t.Helper()
	var n int
	if err := s.pool.QueryRow(t.Context(), `SELECT count(*) FROM converge_events WHERE resource = $1`, resource).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestHookRedeliveryAtOnce: copies of one delivery sent at the same moment
// accept one event; every copy but one is answered 200.
func TestHookRedeliveryAtOnce(t *testing.T) {
	t.Parallel()
	s := hookStack(t)
	repo := hookRepo()
	body := githubPush(repo, "refs/heads/main", "x")
	id := uuid.NewString()
	statuses := hookConcurrently(t, 4, func(int) *evResponse { return ghPost(t, s, "push", id, hookGitHubSecret, body) })
	if statuses[http.StatusAccepted] != 1 || statuses[http.StatusOK] != 3 {
		t.Errorf("statuses = %v, want one 202 and three 200", statuses)
	}
	if n := hookEvents(t, s, repo); n != 1 {
		t.Errorf("%d events, want 1", n)
	}
}

func hookConcurrently(t *testing.T, n int, f func(i int) *evResponse) map[int]int {
	t.Helper()
	var mu sync.Mutex
	statuses := map[int]int{}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			r := f(i)
			mu.Lock()
			statuses[r.status]++
			mu.Unlock()
		})
	}
	wg.Wait()
	return statuses
}

// TestHookVersionAuto: distinct deliveries for one stream at once get
// distinct, increasing versions; a workflow rule's auto version is above
// its steps' streams.
func TestHookVersionAuto(t *testing.T) {
	t.Parallel()
	s := hookStack(t)
	repo := hookRepo()
	statuses := hookConcurrently(t, 5, func(i int) *evResponse {
		return ghPost(t, s, "push", uuid.NewString(), hookGitHubSecret, githubPush(repo, "refs/heads/main", strconv.Itoa(i)))
	})
	if statuses[http.StatusAccepted] != 5 {
		t.Fatalf("statuses = %v, want five 202", statuses)
	}
	rows, err := s.pool.Query(t.Context(), `SELECT version FROM converge_events WHERE kind = 'build' AND resource = $1 ORDER BY version`, repo)
	if err != nil {
		t.Fatal(err)
	}
	var versions []int64
	for rows.Next() {
		var v int64
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		versions = append(versions, v)
	}
	if fmt.Sprint(versions) != "[1 2 3 4 5]" {
		t.Errorf("versions = %v, want [1 2 3 4 5]", versions)
	}

	// The release workflow's build step is the stream build/repo, at 5.
	r := ghPost(t, s, "release", uuid.NewString(), hookGitHubSecret, fmt.Appendf(nil, `{"action": "published", "repository": {"full_name": %q}}`, repo))
	evWantStatus(t, r, http.StatusAccepted)
	m := r.json(t)
	acc := m["accepted"].([]any)
	if len(acc) != 1 {
		t.Fatalf("accepted = %s", r.body)
	}
	wr := acc[0].(map[string]any)["workflow_run"].(map[string]any)
	if wr["version"] != float64(6) || wr["workflow"] != "release" {
		t.Errorf("workflow run = %v, want release at version 6", wr)
	}
	// Its auto version locked the streams of all its steps, but only the
	// root step's was accepted: the others are still unknown resources.
	evWantStatus(t, s.get(t, "/v1/resources/build/"+repo), http.StatusOK)
	for _, stage := range []string{"staging", "canary", "prod"} {
		evWantStatus(t, s.get(t, "/v1/resources/deploy/"+stage+"/"+repo), http.StatusNotFound)
	}

	// A stream already at the greatest version has no auto version above
	// it: mapping-failed, not an overflow.
	spent := hookRepo()
	evWantStatus(t, s.post(t, evBody("build", spent, math.MaxInt64, `{}`)), http.StatusAccepted)
	p := evWantProblem(t, ghPost(t, s, "push", uuid.NewString(), hookGitHubSecret, githubPush(spent, "refs/heads/main", "x")),
		http.StatusUnprocessableEntity, "mapping-failed")
	if f := evFields(t, p); len(f) != 1 || f[0] != "rules[0]" {
		t.Errorf("auto version past the greatest: fields = %v, want rules[0]", f)
	}

	// The delivery, as GET /v1/deliveries/{id} lists it: SPEC §12's
	// fields by name (error only when rejected), the rule that matched
	// and the workflow run it started.
	d := m["delivery"].(map[string]any)
	got := s.get(t, "/v1/deliveries/"+d["id"].(string))
	evWantStatus(t, got, http.StatusOK)
	dm := got.json(t)
	keys := make([]string, 0, len(dm))
	for k := range dm {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if want := []string{"delivery_id", "event_ids", "id", "matched_rules", "received_at", "source", "status", "workflow_run_ids"}; !slices.Equal(keys, want) {
		t.Errorf("delivery fields %v, want %v", keys, want)
	}
	if fmt.Sprint(dm["matched_rules"]) != "[1]" || fmt.Sprint(dm["workflow_run_ids"]) != "["+wr["id"].(string)+"]" ||
		fmt.Sprint(dm["event_ids"]) != "[]" || dm["status"] != "accepted" || dm["source"] != "github" {
		t.Errorf("delivery = %s", got.body)
	}
}

// TestHookMappingFailed: a rule whose expression fails is 422 naming the
// rule, and writes only the rejected delivery row; sent again, it is
// evaluated again.
func TestHookMappingFailed(t *testing.T) {
	t.Parallel()
	s := hookStack(t)
	repo := hookRepo()
	id := uuid.NewString()
	body := githubPush(repo, "refs/heads/broken", "x")
	p := evWantProblem(t, ghPost(t, s, "push", id, hookGitHubSecret, body), http.StatusUnprocessableEntity, "mapping-failed")
	if f := evFields(t, p); len(f) != 1 || f[0] != "rules[2].resource" {
		t.Errorf("fields = %v, want rules[2].resource", f)
	}
	if n := hookEvents(t, s, repo); n != 0 {
		t.Errorf("a mapping failure wrote %d events", n)
	}
	var status string
	if err := s.pool.QueryRow(t.Context(), `SELECT status FROM converge_deliveries WHERE source = 'github' AND delivery_id = $1`, id).Scan(&status); err != nil || status != "rejected" {
		t.Errorf("delivery status = %q (%v), want rejected", status, err)
	}
	evWantProblem(t, ghPost(t, s, "push", id, hookGitHubSecret, body), http.StatusUnprocessableEntity, "mapping-failed")

	// A workflow rule whose resource is a valid key, but one of whose
	// steps would resolve to one over 200 characters (staging/ + 195):
	// mapping-failed naming the rule's resource, as POST /v1/workflow-runs
	// answers 422 naming resource; only the rejected delivery row.
	long := "o/" + strings.Repeat("a", 193)
	id = uuid.NewString()
	p = evWantProblem(t, ghPost(t, s, "release", id, hookGitHubSecret, fmt.Appendf(nil, `{"repository": {"full_name": %q}}`, long)),
		http.StatusUnprocessableEntity, "mapping-failed")
	if f := evFields(t, p); len(f) != 1 || f[0] != "rules[1].resource" {
		t.Errorf("a step resolving to a long key: fields = %v, want rules[1].resource", f)
	}
	if err := s.pool.QueryRow(t.Context(), `SELECT status FROM converge_deliveries WHERE source = 'github' AND delivery_id = $1`, id).Scan(&status); err != nil || status != "rejected" {
		t.Errorf("a step resolving to a long key: delivery status = %q (%v), want rejected", status, err)
	}
	var n int
	if err := s.pool.QueryRow(t.Context(), `SELECT count(*) FROM converge_workflow_runs WHERE resource = $1`, long).Scan(&n); err != nil || n != 0 {
		t.Errorf("a step resolving to a long key: %d workflow runs (%v), want none", n, err)
	}
}

func stdHeaders(t *testing.T, id string, body []byte, contentType string) map[string]string {
	t.Helper()
	key, err := source.StandardKey(hookStdSecret)
	if err != nil {
		t.Fatal(err)
	}
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	return map[string]string{"Authorization": "", "Content-Type": contentType, "webhook-id": id, "webhook-timestamp": ts,
		"webhook-signature": source.SignStandard(key, id, ts, body)}
}

// TestHookCloudEvents: structured and binary mode reach the same rule;
// batch mode is 415.
func TestHookCloudEvents(t *testing.T) {
	t.Parallel()
	s := hookStack(t)
	repo := uuid.NewString()[:8]
	structured := fmt.Appendf(nil, `{"specversion": "1.0", "id": %q, "source": "/registry", "type": "image.pushed", "data": {"repository": %q, "build_number": 7}}`, uuid.NewString(), repo)
	r := s.do(t, http.MethodPost, "/hooks/registry", bytes.NewReader(structured), stdHeaders(t, uuid.NewString(), structured, "application/cloudevents+json"))
	evWantStatus(t, r, http.StatusAccepted)
	ev := r.json(t)["accepted"].([]any)[0].(map[string]any)["event"].(map[string]any)
	if ev["resource"] != "staging/"+repo || ev["version"] != float64(7) {
		t.Errorf("structured: event = %v", ev)
	}

	data := fmt.Appendf(nil, `{"repository": %q, "build_number": 8}`, repo)
	h := stdHeaders(t, uuid.NewString(), data, "application/json")
	h["ce-specversion"], h["ce-id"], h["ce-source"], h["ce-type"] = "1.0", uuid.NewString(), "/registry", "image.pushed"
	r = s.do(t, http.MethodPost, "/hooks/registry", bytes.NewReader(data), h)
	evWantStatus(t, r, http.StatusAccepted)
	ev = r.json(t)["accepted"].([]any)[0].(map[string]any)["event"].(map[string]any)
	if ev["resource"] != "staging/"+repo || ev["version"] != float64(8) {
		t.Errorf("binary: event = %v", ev)
	}

	// Binary mode without ce-id: 422 naming the attribute.
	noID := stdHeaders(t, uuid.NewString(), data, "application/json")
	noID["ce-specversion"], noID["ce-source"], noID["ce-type"] = "1.0", "/registry", "image.pushed"
	p := evWantProblem(t, s.do(t, http.MethodPost, "/hooks/registry", bytes.NewReader(data), noID), http.StatusUnprocessableEntity, "invalid-request")
	if fields := evFields(t, p); len(fields) != 1 || fields[0] != "id" {
		t.Errorf("binary mode without ce-id: errors name %v, want [id]", fields)
	}

	batch := []byte(`[` + string(structured) + `]`)
	evWantProblem(t, s.do(t, http.MethodPost, "/hooks/registry", bytes.NewReader(batch), stdHeaders(t, uuid.NewString(), batch, "application/cloudevents-batch+json")),
		http.StatusUnsupportedMediaType, "unsupported-media-type")

	// A stale timestamp is a bad signature.
	old := stdHeaders(t, uuid.NewString(), structured, "application/cloudevents+json")
	old["webhook-timestamp"] = strconv.FormatInt(time.Now().Add(-10*time.Minute).Unix(), 10)
	evWantProblem(t, s.do(t, http.MethodPost, "/hooks/registry", bytes.NewReader(structured), old), http.StatusUnauthorized, "bad-signature")
}

// TestHookCloudEventStructuredAsJSON: a structured-mode CloudEvent sent as
// plain application/json (or another +json type) without ce-* headers is
// read as structured mode; a JSON body that is not an event is 422, not
// 415; a non-JSON type is still 415.
func TestHookCloudEventStructuredAsJSON(t *testing.T) {
	t.Parallel()
	s := hookStack(t)
	repo := uuid.NewString()[:8]
	for i, ct := range []string{"application/json", "application/json; charset=utf-8", "application/vnd.registry+json"} {
		id := uuid.NewString()
		body := fmt.Appendf(nil, `{"specversion": "1.0", "id": %q, "source": "/registry", "type": "image.pushed", "data": {"repository": %q, "build_number": %d}}`, id, repo, 20+i)
		r := s.do(t, http.MethodPost, "/hooks/registry", bytes.NewReader(body), stdHeaders(t, uuid.NewString(), body, ct))
		evWantStatus(t, r, http.StatusAccepted)
		m := r.json(t)
		if m["delivery"].(map[string]any)["delivery_id"] != id {
			t.Errorf("%s: delivery id = %v, want the event's id %s", ct, m["delivery"], id)
		}
		ev := m["accepted"].([]any)[0].(map[string]any)["event"].(map[string]any)
		if ev["resource"] != "staging/"+repo || ev["version"] != float64(20+i) {
			t.Errorf("%s: event = %v", ct, ev)
		}
	}
	notEvent := []byte(`{"repository": "x", "build_number": 1}`)
	p := evWantProblem(t, s.do(t, http.MethodPost, "/hooks/registry", bytes.NewReader(notEvent), stdHeaders(t, uuid.NewString(), notEvent, "application/json")),
		http.StatusUnprocessableEntity, "invalid-request")
	if d, _ := p["detail"].(string); !strings.Contains(d, "specversion") {
		t.Errorf("detail %q, want it to name specversion", d)
	}
	if fields := evFields(t, p); len(fields) != 1 || fields[0] != "specversion" {
		t.Errorf("errors name %v, want [specversion] (SPEC §4: a validation error names its field)", fields)
	}
	evWantProblem(t, s.do(t, http.MethodPost, "/hooks/registry", bytes.NewReader(notEvent), stdHeaders(t, uuid.NewString(), notEvent, "text/plain")),
		http.StatusUnsupportedMediaType, "unsupported-media-type")
}
