package sourcecheck_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/google/uuid"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/api"
	"github.com/converge-run/converge/jobs"
	"github.com/converge-run/converge/source"
	"github.com/converge-run/converge/test/pgtest"
)

// TestCloudEventsSDKBearerToken sends CloudEvents with the SDK to a source
// authenticated by a bearer token instead of a signature (auth: token): a
// submitter's token is accepted in both modes, and so are the tokens of
// the roles that include submitter (viewer, operator); a missing, unknown
// or signature-only request is 401, and only the accepted events are
// written.
func TestCloudEventsSDKBearerToken(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	svc, err := jobs.NewService(pool, jobs.Config{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	kinds := converge.KindPolicies{"deploy": {Name: "deploy", MaxAttempts: 3}}
	set, err := source.Compile([]converge.SourceDef{{Name: "registry", Type: converge.SourceCloudEvents, BearerToken: true,
		Rules: []converge.SourceRule{{When: `body.type == "image.pushed"`, Kind: "deploy",
			Resource: `"staging/" + body.data.repository`, Version: `int(body.data.build_number)`}}}})
	if err != nil {
		t.Fatal(err)
	}
	var srvAPI *api.Server
	recv := set.Receiver(source.ReceiverParams{Store: svc.Store(), Kinds: kinds,
		Authenticate: func(ctx context.Context, tok string) (*converge.Actor, error) { return srvAPI.Authenticate(ctx, tok) }})
	srvAPI = api.New(api.Config{Store: svc.Store(), Kinds: kinds, MaxPayloadBytes: 1 << 16, Logger: logger, Hooks: recv.Receive})
	srv := httptest.NewServer(srvAPI)
	t.Cleanup(srv.Close)
	token := func(role converge.Role) string {
		tok, _, err := svc.Store().TokenCreate(t.Context(), "registry-"+string(role), role, converge.AuditEntry{Actor: "admin", Role: "operator"})
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	submitter, operator, viewer := token(converge.RoleSubmitter), token(converge.RoleOperator), token(converge.RoleViewer)

	repo := uuid.NewString()[:8]
	send := func(mode string, build int, rt http.RoundTripper, header ...string) int {
		t.Helper()
		opts := []cehttp.Option{cloudevents.WithTarget(srv.URL + "/hooks/registry")}
		if rt != nil {
			opts = append(opts, cehttp.WithRoundTripper(rt))
		}
		if len(header) == 2 {
			opts = append(opts, cehttp.WithHeader(header[0], header[1]))
		}
		p, err := cloudevents.NewHTTP(opts...)
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
		if err := e.SetData(cloudevents.ApplicationJSON, map[string]any{"repository": repo, "build_number": build}); err != nil {
			t.Fatal(err)
		}
		ctx := cloudevents.WithEncodingBinary(context.Background())
		if mode == "structured" {
			ctx = cloudevents.WithEncodingStructured(context.Background())
		}
		var hr *cehttp.Result
		if res := c.Send(ctx, e); !cloudevents.ResultAs(res, &hr) {
			t.Fatalf("send: %v", res)
		}
		return hr.StatusCode
	}
	cases := []struct {
		name   string
		build  int
		rt     http.RoundTripper
		header []string
		want   int
	}{
		{"submitter, binary", 1, nil, []string{"Authorization", "Bearer " + submitter}, http.StatusAccepted},
		{"operator, structured", 2, nil, []string{"Authorization", "Bearer " + operator}, http.StatusAccepted},
		{"viewer", 3, nil, []string{"Authorization", "Bearer " + viewer}, http.StatusAccepted},
		{"unknown token", 4, nil, []string{"Authorization", "Bearer cv_not-a-token"}, http.StatusUnauthorized},
		{"no token", 5, nil, nil, http.StatusUnauthorized},
		{"a signature instead", 6, signer{http.DefaultTransport}, nil, http.StatusUnauthorized},
	}
	for _, c := range cases {
		mode := "binary"
		if c.build%2 == 0 {
			mode = "structured"
		}
		if got := send(mode, c.build, c.rt, c.header...); got != c.want {
			t.Errorf("%s: status %d, want %d", c.name, got, c.want)
		}
	}
	var versions []int64
	rows, err := pool.Query(t.Context(), `SELECT version FROM converge_events WHERE resource = $1 ORDER BY version`, "staging/"+repo)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var v int64
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		versions = append(versions, v)
	}
	if len(versions) != 3 || versions[0] != 1 || versions[1] != 2 || versions[2] != 3 {
		t.Errorf("events %v, want versions [1 2 3] (the submitter's, the operator's and the viewer's)", versions)
	}
}
