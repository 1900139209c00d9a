package api_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/api"
	"github.com/converge-run/converge/source"
)

// fuzzHookSources are the sources of FuzzHookDecodeAndRules: one of each
// type, with rules that read deep into the body, convert numbers and
// build payloads, so that the fuzzer reaches CEL's evaluation errors.
var fuzzHookSources = []converge.SourceDef{
	{Name: "github", Type: converge.SourceGitHub, Secret: "fuzz-secret", Rules: []converge.SourceRule{
		{When: `headers["x-github-event"] == "push" && body.ref == "refs/heads/main"`, Kind: "build",
			Resource: `body.repository.full_name`, Version: "auto", Payload: `{"sha": body.after, "n": size(body.commits)}`},
		{When: `has(body.release) && body.release.prerelease == false`, Kind: "deploy",
			Resource: `"prod/" + body.repository.name`, Version: `int(body.release.id)`},
		{When: `headers["x-github-event"] == "workflow_run"`, Kind: "deploy",
			Resource: `"staging/" + string(body.workflow_run.head_branch)`, Version: `body.workflow_run.run_number`,
			Payload: `{"x": body.workflow_run.pull_requests.map(p, p.number)}`},
	}},
	{Name: "registry", Type: converge.SourceCloudEvents, Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", Rules: []converge.SourceRule{
		{When: `body.type == "image.pushed"`, Kind: "deploy", Resource: `"staging/" + body.data.repository`,
			Version: `int(body.data.build_number)`, Payload: `{"source": body.source, "tags": body.data.tags}`},
	}},
	{Name: "plain", Type: converge.SourceWebhook, Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", Rules: []converge.SourceRule{
		{Kind: "build", Resource: `body.app`, Version: `double(body.v) * 1.0`, Payload: `body.meta`},
	}},
}

// FuzzHookDecodeAndRules feeds bodies and headers to the hook decoders
// (GitHub and Standard Webhooks JSON, CloudEvents structured and binary
// mode) and the CEL evaluation of every rule, as POST /hooks/{source}
// runs them before anything is written, and to both signature checks.
// Nothing panics; every refusal is a 4xx problem (never a 5xx); what a
// rule maps a body to is a valid resource key, a positive version (or
// auto) and a JSON object payload.
func FuzzHookDecodeAndRules(f *testing.F) {
	seeds := []struct{ source, contentType, event, body string }{
		{"github", "application/json", "push", `{"ref":"refs/heads/main","after":"abc","commits":[],"repository":{"full_name":"acme/web","name":"web"}}`},
		{"github", "application/json", "release", `{"action":"published","release":{"id":184220931,"prerelease":false},"repository":{"name":"web"}}`},
		{"github", "application/json", "release", `{"release":{"id":1.5,"prerelease":false},"repository":{"name":"web"}}`},
		{"github", "application/json", "workflow_run", `{"workflow_run":{"head_branch":"main","run_number":1287,"pull_requests":[{"number":7}]}}`},
		{"github", "application/json", "workflow_run", `{"workflow_run":{"head_branch":null,"run_number":-1,"pull_requests":{}}}`},
		{"github", "application/json", "ping", `{"zen":"Design for failure.","hook_id":1}`},
		{"github", "text/plain", "push", `{}`},
		{"github", "application/json", "push", `{"ref":"refs/heads/main","repository":{"full_name":"/../x"}}`},
		{"registry", "application/cloudevents+json", "", `{"specversion":"1.0","id":"e1","source":"/r","type":"image.pushed","data":{"repository":"web","build_number":42,"tags":["a"]}}`},
		{"registry", "application/cloudevents+json", "", `{"specversion":"1.0","id":"e1","source":"/r","type":"image.pushed","data_base64":"eyJhIjoxfQ=="}`},
		{"registry", "application/cloudevents-batch+json", "", `[{"specversion":"1.0","id":"e1"}]`},
		{"registry", "application/json", "binary", `{"repository":"web","build_number":1e300}`},
		{"registry", "application/json", "binary", `{"repository":"web","build_number":9007199254740993}`},
		{"plain", "application/json", "", `{"app":"app/web","v":3,"meta":{"k":[1,2,{"z":null}]}}`},
		{"plain", "application/vnd.acme+json", "", `{"app":"app/web","v":0,"meta":[]}`},
		{"plain", "application/json", "", `{"app":"app/web","v":1,"meta":{"a":"\u0000"}}`},
		{"plain", "application/json", "", `[1,2,3]`},
		{"plain", "application/json", "", `null`},
		{"plain", "application/json", "", `{"app":"` + strings.Repeat("a", 300) + `","v":1}`},
	}
	for _, s := range seeds {
		f.Add(s.source, s.contentType, s.event, []byte(s.body), "v1,AAAA", "e1")
	}
	set, err := source.Compile(fuzzHookSources)
	if err != nil {
		f.Fatal(err)
	}
	key, err := source.StandardKey("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, src, contentType, event string, body []byte, signature, id string) {
		h := http.Header{}
		h.Set("Content-Type", contentType)
		if event == "binary" {
			// CloudEvents binary mode: the attributes in ce- headers.
			h.Set("Ce-Specversion", "1.0")
			h.Set("Ce-Id", id)
			h.Set("Ce-Source", "/registry")
			h.Set("Ce-Type", "image.pushed")
		} else {
			h.Set("X-GitHub-Event", event)
		}
		h.Set("X-GitHub-Delivery", id)
		h.Set("Webhook-Id", id)

		// The signature checks only ever answer bad-signature.
		now := time.Now()
		for _, err := range []error{
			source.VerifyGitHub([]byte("fuzz-secret"), signature, body),
			source.VerifyStandard(key, id, strconv.FormatInt(now.Unix(), 10), signature, body, now),
			source.VerifyStandard(key, id, signature, signature, body, now),
		} {
			if err != nil && !errors.Is(err, source.ErrBadSignature) {
				t.Fatalf("signature check: %v, want nil or bad-signature", err)
			}
		}

		res, err := set.Test(src, h, body)
		if err != nil {
			fuzzAppError(t, err, converge.ENOTFOUND, converge.EUNSUPPORTEDMEDIA, converge.EMALFORMED, converge.EINVALID)
			if status := api.ErrorStatus(err); status < 400 || status >= 500 {
				t.Fatalf("%v is answered %d, want a 4xx", err, status)
			}
			return
		}
		switch res.Status {
		case "accepted", "ignored", "rejected":
		default:
			t.Fatalf("status %q", res.Status)
		}
		for _, v := range res.Rules {
			if v.Error != "" {
				if v.Matched || !utf8.ValidString(v.Error) || !strings.HasPrefix(v.Error, "rules[") {
					t.Fatalf("rule %d: error %q (matched %v): want a valid message naming the rule", v.Rule, v.Error, v.Matched)
				}
				if status := api.ErrorStatus(&converge.AppError{Code: converge.EMAPPINGFAILED}); status != http.StatusUnprocessableEntity {
					t.Fatalf("mapping-failed is answered %d", status)
				}
				continue
			}
			if !v.Matched {
				continue
			}
			if err := converge.ValidateResource(v.Resource); err != nil {
				t.Fatalf("rule %d maps to resource %q: %v", v.Rule, v.Resource, err)
			}
			if v.VersionAuto == (v.Version != 0) || v.Version < 0 {
				t.Fatalf("rule %d maps to version %d (auto %v)", v.Rule, v.Version, v.VersionAuto)
			}
			var obj map[string]any
			if err := json.Unmarshal(v.Payload, &obj); err != nil || obj == nil {
				t.Fatalf("rule %d maps to payload %s: not a JSON object", v.Rule, v.Payload)
			}
		}
	})
}
