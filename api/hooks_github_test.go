package api_test

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/uuid"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/api"
	"github.com/converge-run/converge/jobs"
	"github.com/converge-run/converge/source"
	"github.com/converge-run/converge/test/pgtest"
)

// githubFixtureRules map the real-shaped deliveries of testdata/github
// (the acme/web repository) to events, one rule per event type.
var githubFixtureRules = []converge.SourceRule{
	{When: `headers["x-github-event"] == "push" && body.ref == "refs/heads/main"`, Kind: "build",
		Resource: `body.repository.full_name`, Version: "auto",
		Payload: `{"sha": body.after, "pusher": body.pusher.name, "message": body.head_commit.message}`},
	{When: `headers["x-github-event"] == "release" && body.action == "published" && !body.release.prerelease`, Kind: "deploy",
		Resource: `"prod/" + body.repository.name`, Version: "auto", Payload: `{"tag": body.release.tag_name}`},
	{When: `headers["x-github-event"] == "workflow_run" && body.action == "completed" && body.workflow_run.conclusion == "success" && body.workflow_run.head_branch == "main"`,
		Kind: "deploy", Resource: `"staging/" + body.repository.name`, Version: `int(body.workflow_run.run_number)`,
		Payload: `{"sha": body.workflow_run.head_sha, "run": body.workflow_run.html_url}`},
	{When: `headers["x-github-event"] == "package" && body.action == "published" && body.package.package_type == "CONTAINER"`,
		Kind: "deploy", Resource: `"registry/" + body.package.namespace + "/" + body.package.name`, Version: "auto",
		Payload: `{"tag": body.package.package_version.container_metadata.tag.name, "digest": body.package.package_version.container_metadata.tag.digest}`},
}

// githubFixtureStack serves /hooks/github with githubFixtureRules.
func githubFixtureStack(t *testing.T) *evStack {
	t.Helper()
	pool := pgtest.Pool(t)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	svc, err := jobs.NewService(pool, jobs.Config{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	kinds := converge.KindPolicies{"build": {Name: "build", MaxAttempts: 5}, "deploy": {Name: "deploy", MaxAttempts: 3}}
	set, err := source.Compile([]converge.SourceDef{{Name: "github", Type: converge.SourceGitHub, Secret: hookGitHubSecret, Rules: githubFixtureRules}})
	if err != nil {
		t.Fatal(err)
	}
	recv := set.Receiver(source.ReceiverParams{Store: svc.Store(), Kinds: kinds})
	srv := httptest.NewServer(api.New(api.Config{Store: svc.Store(), Kinds: kinds, MaxPayloadBytes: 1 << 18, AdminToken: evAdminToken,
		Logger: logger, Hooks: recv.Receive}))
	t.Cleanup(srv.Close)
	return &evStack{url: srv.URL, pool: pool, store: svc.Store(), srv: srv}
}

func githubFixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "github", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestHookGitHubFixtures posts GitHub's push, release, workflow_run,
// package and ping deliveries as GitHub sends them (headers, signature
// over the exact bytes): each starts the event its rule maps it to, and
// ping, which no rule matches, is ignored (202, a delivery row). The same bytes tampered with, signed with another
// secret or not signed are 401 bad-signature and write nothing; sent
// again they are the first answer.
func TestHookGitHubFixtures(t *testing.T) {
	t.Parallel()
	s := githubFixtureStack(t)
	cases := []struct {
		event, resource string
		version         float64
		payload         map[string]any
	}{
		{"push", "acme/web", 1, map[string]any{"sha": "7c1f3e2d9a8b4c5d6e7f8091a2b3c4d5e6f70819", "pusher": "mona",
			"message": "Checkout: keep the basket across sign-in"}},
		{"release", "prod/web", 1, map[string]any{"tag": "v2.14.0"}},
		{"workflow_run", "staging/web", 1287, map[string]any{"sha": "7c1f3e2d9a8b4c5d6e7f8091a2b3c4d5e6f70819",
			"run": "https://github.com/acme/web/actions/runs/12046685123"}},
		{"package", "registry/acme/web", 1, map[string]any{"tag": "2.14.0",
			"digest": "sha256:9b2f6c1d0e3a4f5b6c7d8e9f0a1b2c3d4e5f60718293a4b5c6d7e8f9a0b1c2d3"}},
		{"ping", "", 0, nil},
	}
	for _, c := range cases {
		body := githubFixture(t, c.event)
		headers := func(delivery, signature string) map[string]string {
			h := map[string]string{"Authorization": "", "Content-Type": "application/json", "User-Agent": "GitHub-Hookshot/3f2c8e1",
				"X-GitHub-Event": c.event, "X-GitHub-Delivery": delivery, "X-GitHub-Hook-ID": "489201733",
				"X-GitHub-Hook-Installation-Target-Type": "repository", "X-GitHub-Hook-Installation-Target-ID": "418273645"}
			if signature != "" {
				h["X-Hub-Signature-256"] = signature
				h["X-Hub-Signature"] = "sha1=0000000000000000000000000000000000000000" // the legacy header: not trusted
			}
			return h
		}
		post := func(b []byte, h map[string]string) *evResponse {
			return s.do(t, http.MethodPost, "/hooks/github", bytes.NewReader(b), h)
		}
		good := source.SignGitHub([]byte(hookGitHubSecret), body)

		// Refused: tampered, another secret, no signature.
		bad := uuid.NewString()
		tampered := bytes.Replace(body, []byte(`"acme/web"`), []byte(`"evil/web"`), 1)
		if bytes.Equal(tampered, body) {
			t.Fatalf("%s: the fixture has no acme/web to tamper with", c.event)
		}
		for what, r := range map[string]*evResponse{
			"tampered":       post(tampered, headers(bad, good)),
			"another secret": post(body, headers(bad, source.SignGitHub([]byte("not-the-secret"), body))),
			"no signature":   post(body, headers(bad, "")),
		} {
			if r.status != http.StatusUnauthorized {
				t.Errorf("%s %s: %d %s, want 401 bad-signature", c.event, what, r.status, r.body)
			}
		}
		if n := hookDeliveries(t, s, bad); n != 0 {
			t.Errorf("%s: refused deliveries wrote %d delivery rows", c.event, n)
		}

		id := uuid.NewString()
		r := post(body, headers(id, good))
		if c.event == "ping" {
			// A ping is a delivery as any other: no rule matches it, so it
			// is ignored (202, its delivery row written), and sent again it
			// is its first answer (200).
			evWantStatus(t, r, http.StatusAccepted)
			m := r.json(t)
			d, _ := m["delivery"].(map[string]any)
			acc, ok := m["accepted"].([]any)
			if d == nil || d["status"] != "ignored" || !ok || len(acc) != 0 {
				t.Errorf("ping: answer %s, want 202 ignored with accepted []", r.body)
			}
			if n := hookDeliveries(t, s, id); n != 1 {
				t.Errorf("ping wrote %d delivery rows, want 1", n)
			}
			again := post(body, headers(id, good))
			evWantStatus(t, again, http.StatusOK)
			if !bytes.Equal(again.body, r.body) {
				t.Errorf("ping sent again: %s, want the first answer %s", again.body, r.body)
			}
			if n := hookDeliveries(t, s, id); n != 1 {
				t.Errorf("ping sent twice wrote %d delivery rows, want 1", n)
			}
			continue
		}
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
		if len(ans.Accepted) != 1 || ans.Accepted[0].Event == nil || ans.Accepted[0].Outcome != "accepted" {
			t.Fatalf("%s: answer %s, want one accepted event", c.event, r.body)
		}
		ev := ans.Accepted[0].Event
		var payload map[string]any
		_ = json.Unmarshal(ev.Payload, &payload)
		if ev.Resource != c.resource || float64(ev.Version) != c.version || !jsonEqualMaps(payload, c.payload) {
			t.Errorf("%s: event %s@%d %s, want %s@%v %v", c.event, ev.Resource, ev.Version, ev.Payload, c.resource, c.version, c.payload)
		}
		// GitHub redelivers with the same X-GitHub-Delivery: the first answer.
		again := post(body, headers(id, good))
		evWantStatus(t, again, http.StatusOK)
		if !bytes.Contains(again.body, []byte(ans.Delivery.ID.String())) || hookEvents(t, s, c.resource) != 1 {
			t.Errorf("%s: the redelivery is not the first answer (%s) or accepted another event", c.event, again.body)
		}
	}
}

func jsonEqualMaps(a, b map[string]any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}
