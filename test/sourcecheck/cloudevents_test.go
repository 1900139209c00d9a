package sourcecheck_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/google/uuid"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/api"
	"github.com/converge-run/converge/jobs"
	"github.com/converge-run/converge/source"
	"github.com/converge-run/converge/test/pgtest"
)

const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// signer signs every request the SDK sends with the Standard Webhooks
// scheme, as a registry in front of converge would.
type signer struct{ next http.RoundTripper }

func (s signer) RoundTrip(req *http.Request) (*http.Response, error) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return nil, err
	}
	key, err := source.StandardKey(secret)
	if err != nil {
		return nil, err
	}
	id, ts := uuid.NewString(), strconv.FormatInt(time.Now().Unix(), 10)
	req = req.Clone(req.Context())
	req.Body = io.NopCloser(bytes.NewReader(body))
	req.ContentLength = int64(len(body))
	req.Header.Set("webhook-id", id)
	req.Header.Set("webhook-timestamp", ts)
	req.Header.Set("webhook-signature", source.SignStandard(key, id, ts, body))
	return s.next.RoundTrip(req)
}

func server(t *testing.T) string {
	t.Helper()
	pool := pgtest.Pool(t)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	svc, err := jobs.NewService(pool, jobs.Config{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	kinds := converge.KindPolicies{"deploy": {Name: "deploy", MaxAttempts: 3}}
	set, err := source.Compile([]converge.SourceDef{{Name: "registry", Type: converge.SourceCloudEvents, Secret: secret,
		Rules: []converge.SourceRule{{When: `body.type == "image.pushed"`, Kind: "deploy",
			Resource: `"staging/" + body.data.repository`, Version: `int(body.data.build_number)`,
			Payload: `{"source": body.source, "id": body.id}`}}}})
	if err != nil {
		t.Fatal(err)
	}
	recv := set.Receiver(source.ReceiverParams{Store: svc.Store(), Kinds: kinds, Answer: api.DeliveryAnswerJSON})
	srv := httptest.NewServer(api.New(api.Config{Store: svc.Store(), Kinds: kinds, MaxPayloadBytes: 1 << 16, Logger: logger, Hooks: recv.Receive}))
	t.Cleanup(srv.Close)
	return srv.URL + "/hooks/registry"
}

// TestCloudEventsSDK sends image.pushed events with the SDK, in binary and
// structured mode: each is accepted as a deploy event of its build number;
// the same event sent again (same id) is answered 200 with the first answer.
func TestCloudEventsSDK(t *testing.T) {
	t.Parallel()
	target := server(t)
	repo := uuid.NewString()[:8]
	for i, mode := range []string{"binary", "structured"} {
		p, err := cloudevents.NewHTTP(cloudevents.WithTarget(target), cehttp.WithRoundTripper(signer{http.DefaultTransport}))
		if err != nil {
			t.Fatal(err)
		}
		c, err := cloudevents.NewClient(p, cloudevents.WithTimeNow(), cloudevents.WithUUIDs())
		if err != nil {
			t.Fatal(err)
		}
		e := cloudevents.NewEvent()
		e.SetID(uuid.NewString())
		e.SetSource("/registry/" + repo)
		e.SetType("image.pushed")
		if err := e.SetData(cloudevents.ApplicationJSON, map[string]any{"repository": repo, "build_number": 10 + i}); err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if mode == "structured" {
			ctx = cloudevents.WithEncodingStructured(ctx)
		} else {
			ctx = cloudevents.WithEncodingBinary(ctx)
		}
		for try, want := range []int{http.StatusAccepted, http.StatusOK} {
			res := c.Send(ctx, e)
			var hr *cehttp.Result
			if !cloudevents.ResultAs(res, &hr) {
				t.Fatalf("%s: send: %v", mode, res)
			}
			if hr.StatusCode != want {
				t.Errorf("%s, send %d: status %d, want %d (%v)", mode, try+1, hr.StatusCode, want, res)
			}
		}
	}
	// Both events are there, each once, with the versions of their data.
	pool := pgtest.Pool(t)
	rows, err := pool.Query(t.Context(), `SELECT version, payload FROM converge_events WHERE resource = $1 ORDER BY version`, "staging/"+repo)
	if err != nil {
		t.Fatal(err)
	}
	var got []int64
	for rows.Next() {
		var v int64
		var payload json.RawMessage
		if err := rows.Scan(&v, &payload); err != nil {
			t.Fatal(err)
		}
		var pl map[string]string
		_ = json.Unmarshal(payload, &pl)
		if pl["source"] != "/registry/"+repo || pl["id"] == "" {
			t.Errorf("payload %s: want the event's source and id", payload)
		}
		got = append(got, v)
	}
	if len(got) != 2 || got[0] != 10 || got[1] != 11 {
		t.Errorf("versions = %v, want [10 11]", got)
	}
}

// plainJSON rewrites the SDK's structured-mode Content-Type
// (application/cloudevents+json) to application/json, as senders that
// post structured events as plain JSON do.
type plainJSON struct{ next http.RoundTripper }

func (p plainJSON) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	if req.Header.Get("Content-Type") == cloudevents.ApplicationCloudEventsJSON {
		req.Header.Set("Content-Type", cloudevents.ApplicationJSON)
	}
	return p.next.RoundTrip(req)
}

// TestCloudEventsSDKStructuredAsJSON sends a structured-mode event made by
// the SDK with Content-Type application/json and no ce-* headers: it is
// read as structured mode and accepted once (200 with the first answer on
// the same id).
func TestCloudEventsSDKStructuredAsJSON(t *testing.T) {
	t.Parallel()
	target := server(t)
	repo := uuid.NewString()[:8]
	var sent http.Header
	spy := roundTripFunc(func(req *http.Request) (*http.Response, error) {
		sent = req.Header.Clone()
		return http.DefaultTransport.RoundTrip(req)
	})
	p, err := cloudevents.NewHTTP(cloudevents.WithTarget(target), cehttp.WithRoundTripper(plainJSON{signer{spy}}))
	if err != nil {
		t.Fatal(err)
	}
	c, err := cloudevents.NewClient(p, cloudevents.WithTimeNow())
	if err != nil {
		t.Fatal(err)
	}
	e := cloudevents.NewEvent()
	e.SetID(uuid.NewString())
	e.SetSource("/registry/" + repo)
	e.SetType("image.pushed")
	if err := e.SetData(cloudevents.ApplicationJSON, map[string]any{"repository": repo, "build_number": 30}); err != nil {
		t.Fatal(err)
	}
	ctx := cloudevents.WithEncodingStructured(context.Background())
	for try, want := range []int{http.StatusAccepted, http.StatusOK} {
		res := c.Send(ctx, e)
		var hr *cehttp.Result
		if !cloudevents.ResultAs(res, &hr) {
			t.Fatalf("send: %v", res)
		}
		if hr.StatusCode != want {
			t.Errorf("send %d: status %d, want %d (%v)", try+1, hr.StatusCode, want, res)
		}
	}
	if ct := sent.Get("Content-Type"); ct != cloudevents.ApplicationJSON || sent.Get("Ce-Specversion") != "" {
		t.Errorf("sent Content-Type %q, ce-specversion %q: want application/json and no ce-* headers", ct, sent.Get("Ce-Specversion"))
	}
	var n int
	var version int64
	if err := pgtest.Pool(t).QueryRow(t.Context(), `SELECT count(*), max(version) FROM converge_events WHERE resource = $1`, "staging/"+repo).Scan(&n, &version); err != nil {
		t.Fatal(err)
	}
	if n != 1 || version != 30 {
		t.Errorf("%d events, version %d; want one at 30", n, version)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }
