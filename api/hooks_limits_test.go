package api_test

import (
	"bytes"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/converge-run/converge"
)

// ceStructured posts a structured-mode CloudEvent to the registry source,
// signed.
func ceStructured(t *testing.T, s *evStack, data string) (*evResponse, string) {
	t.Helper()
	id := uuid.NewString()
	body := fmt.Appendf(nil, `{"specversion": "1.0", "id": %q, "source": "/registry", "type": "image.pushed", "data": %s}`, id, data)
	return s.do(t, http.MethodPost, "/hooks/registry", bytes.NewReader(body), stdHeaders(t, uuid.NewString(), body, "application/cloudevents+json")), id
}

// hookRejected checks that a delivery was refused 422 mapping-failed
// naming field, and wrote only its rejected delivery row.
func hookRejected(t *testing.T, s *evStack, r *evResponse, deliveryID, field, says string) {
	t.Helper()
	p := evWantProblem(t, r, http.StatusUnprocessableEntity, "mapping-failed")
	if f := evFields(t, p); len(f) != 1 || f[0] != field {
		t.Errorf("fields = %v, want [%s]", f, field)
	}
	if d, _ := p["detail"].(string); !strings.Contains(d, says) {
		t.Errorf("detail %q, want it to say %q", d, says)
	}
	var status string
	var events int
	if err := s.pool.QueryRow(t.Context(), `SELECT status, cardinality(event_ids) FROM converge_deliveries WHERE delivery_id = $1`, deliveryID).Scan(&status, &events); err != nil || status != "rejected" || events != 0 {
		t.Errorf("delivery %s: status %q with %d events (%v), want rejected with none", deliveryID, status, events, err)
	}
}

// TestHookVersionOver2p53: a CloudEvent build number from 2^53 on, which
// CEL reads as a double that may not be the number sent (2^53 + 1 reads as
// 2^53), is refused naming the rule's version instead of stored wrong;
// 2^53 - 1 is accepted as sent.
func TestHookVersionOver2p53(t *testing.T) {
	t.Parallel()
	s := hookStack(t)
	repo := uuid.NewString()[:8]
	for _, n := range []string{"9007199254740992", "9007199254740993", "9007199254740994", "1e300"} {
		r, id := ceStructured(t, s, fmt.Sprintf(`{"repository": %q, "build_number": %s}`, repo, n))
		hookRejected(t, s, r, id, "rules[0].version", "")
	}
	if n := hookEvents(t, s, "staging/"+repo); n != 0 {
		t.Errorf("%d events accepted, want none", n)
	}
	r, _ := ceStructured(t, s, fmt.Sprintf(`{"repository": %q, "build_number": 9007199254740991}`, repo))
	evWantStatus(t, r, http.StatusAccepted)
	if !bytes.Contains(r.body, []byte(`"version":9007199254740991`)) {
		t.Errorf("answer %s, want version 9007199254740991", r.body)
	}
}

// TestHookPayloadLimits: the payload a rule builds is held to SPEC §4's
// limits on a submitted payload: a number whose plain decimal form is over
// 64 characters (1e300 would be stored as 301 digits), nesting past 64
// levels, or more than max_payload_bytes is 422 mapping-failed naming the
// rule's payload, and writes only the rejected delivery row; 64 levels
// and a 64-character number pass.
func TestHookPayloadLimits(t *testing.T) {
	t.Parallel()
	defs := append(slices.Clone(hookSources), converge.SourceDef{Name: "plain", Type: converge.SourceWebhook, Secret: hookStdSecret,
		Rules: []converge.SourceRule{{Kind: "build", Resource: `body.repo`, Version: "auto",
			Payload: `{"a": body.blob, "b": body.blob, "c": body.blob}`}}})
	s := hookStackWith(t, 0, defs)
	repo := hookRepo()
	nested := func(levels int) string { // levels of arrays around a string
		return strings.Repeat("[", levels) + `"x"` + strings.Repeat("]", levels)
	}
	refused := []struct{ after, says string }{
		{"1e300", "plain decimal form is over 64 characters"},
		{"-1e-300", "plain decimal form is over 64 characters"},
		{nested(64), "nested deeper than 64 levels"}, // the payload object is depth 1
		{nested(70), "nested deeper than 64 levels"},
	}
	for _, c := range refused {
		id := uuid.NewString()
		body := fmt.Appendf(nil, `{"ref": "refs/heads/main", "after": %s, "repository": {"full_name": %q}}`, c.after, repo)
		hookRejected(t, s, ghPost(t, s, "push", id, hookGitHubSecret, body), id, "rules[0].payload", c.says)
	}
	if n := hookEvents(t, s, repo); n != 0 {
		t.Fatalf("%d events accepted, want none", n)
	}
	for _, after := range []string{nested(63), "1" + strings.Repeat("0", 63)} {
		body := fmt.Appendf(nil, `{"ref": "refs/heads/main", "after": %s, "repository": {"full_name": %q}}`, after, repo)
		evWantStatus(t, ghPost(t, s, "push", uuid.NewString(), hookGitHubSecret, body), http.StatusAccepted)
	}

	// Three copies of a 1500-byte string: a payload over max_payload_bytes
	// (4096) built from a body under it.
	id := uuid.NewString()
	body := fmt.Appendf(nil, `{"repo": %q, "blob": %q}`, repo, strings.Repeat("b", 1500))
	r := s.do(t, http.MethodPost, "/hooks/plain", bytes.NewReader(body), stdHeaders(t, id, body, "application/json"))
	hookRejected(t, s, r, id, "rules[0].payload", fmt.Sprintf("over max_payload_bytes (%d)", evMaxPayload))
}

// TestHookBodyReadAsSent: a delivery whose JSON body the rules could not
// read as it was sent is 422 invalid-request naming body, writes nothing,
// and starts nothing, whether the rules read the field or not, as POST
// /v1/events refuses such a payload: text that is not valid UTF-8 or has
// a lone UTF-16 surrogate escape (a decoder reads U+FFFD in their place,
// so the event's payload would not be what was sent), and a number beyond
// a double (1e400). A GitHub body, a structured-mode CloudEvent and a
// binary-mode one's data alike. A surrogate pair and a \u0000 the rules do
// not read are accepted.
func TestHookBodyReadAsSent(t *testing.T) {
	t.Parallel()
	s := hookStack(t)
	bad := []struct{ name, value, says string }{
		{"bytes not UTF-8", "\"\xff\xfe\"", "must be valid UTF-8"},
		{"a lone high surrogate", `"\ud800"`, "lone UTF-16 surrogate"},
		{"a lone low surrogate", `"a\udc00b"`, "lone UTF-16 surrogate"},
		{"a number beyond a double", `1e400`, "beyond a double"},
	}
	refused := func(what string, r *evResponse, deliveryID, says string) {
		t.Helper()
		p := evWantProblem(t, r, http.StatusUnprocessableEntity, "invalid-request")
		if f := evFields(t, p); len(f) != 1 || f[0] != "body" {
			t.Errorf("%s: fields = %v, want [body]", what, f)
		}
		if d, _ := p["detail"].(string); !strings.Contains(d, says) {
			t.Errorf("%s: detail %q, want it to say %q", what, d, says)
		}
		if n := hookDeliveries(t, s, deliveryID); n != 0 {
			t.Errorf("%s: %d delivery rows, want none", what, n)
		}
	}
	for _, c := range bad {
		for _, field := range []string{"after", "unread"} { // the rule's payload reads after
			repo := hookRepo()
			id := uuid.NewString()
			body := fmt.Appendf(nil, `{"ref": "refs/heads/main", %q: %s, "repository": {"full_name": %q}}`, field, c.value, repo)
			refused("github, "+c.name+" in "+field, ghPost(t, s, "push", id, hookGitHubSecret, body), id, c.says)
			if n := hookEvents(t, s, repo); n != 0 {
				t.Errorf("github, %s in %s: %d events accepted, want none", c.name, field, n)
			}
		}
		r, id := ceStructured(t, s, fmt.Sprintf(`{"repository": "web", "build_number": 7, "note": %s}`, c.value))
		refused("structured cloudevent, "+c.name, r, id, c.says)

		data := fmt.Appendf(nil, `{"repository": "web", "build_number": 8, "note": %s}`, c.value)
		id = uuid.NewString()
		h := stdHeaders(t, uuid.NewString(), data, "application/json")
		h["ce-specversion"], h["ce-id"], h["ce-source"], h["ce-type"] = "1.0", id, "/registry", "image.pushed"
		refused("binary cloudevent, "+c.name, s.do(t, http.MethodPost, "/hooks/registry", bytes.NewReader(data), h), id, c.says)
	}

	repo := hookRepo()
	body := fmt.Appendf(nil, `{"ref": "refs/heads/main", "after": "\ud83d\ude00", "unread": "\u0000", "repository": {"full_name": %q}}`, repo)
	r := ghPost(t, s, "push", uuid.NewString(), hookGitHubSecret, body)
	evWantStatus(t, r, http.StatusAccepted)
	if !bytes.Contains(r.body, []byte(`"payload":{"sha":"😀"}`)) {
		t.Errorf("answer %s, want the payload {\"sha\":\"😀\"}", r.body)
	}
}
