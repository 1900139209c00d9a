package api_test

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/converge-run/converge/source"
)

// TestHookDeliveryIDs: a delivery id is 1 to 200 characters of valid UTF-8
// without NUL, in every source type. Bytes that are not UTF-8 (a header
// carries any byte from 0x80 on) or a NUL (a JSON id may hold one) are 422
// naming the id's field and write nothing; they were a 500, the database
// refusing the insert. Length counts characters, not bytes.
func TestHookDeliveryIDs(t *testing.T) {
	t.Parallel()
	s := hookStack(t)
	push := func(id string) *evResponse {
		return ghPost(t, s, "push", id, hookGitHubSecret, githubPush(hookRepo(), "refs/heads/main", "abc"))
	}
	for _, id := range []string{"bad\xff\xfe" + uuid.NewString(), strings.Repeat("é", 201)} {
		p := evWantProblem(t, push(id), http.StatusUnprocessableEntity, "invalid-request")
		if f := evFields(t, p); len(f) != 1 || f[0] != "x-github-delivery" {
			t.Errorf("github delivery %.20q: fields %v, want [x-github-delivery]", id, f)
		}
	}
	long := strings.Repeat("é", 199) + uuid.NewString()[:1]
	evWantStatus(t, push(long), http.StatusAccepted)
	if n := hookDeliveries(t, s, long); n != 1 {
		t.Errorf("a 200-character id of 399 bytes: %d delivery rows, want 1", n)
	}

	// A structured CloudEvent whose id holds a NUL, and a binary one whose
	// ce-id holds bytes that are not UTF-8.
	nul := fmt.Appendf(nil, `{"specversion": "1.0", "id": "a\u0000%s", "source": "/registry", "type": "image.pushed", "data": {"repository": "web", "build_number": 1}}`, uuid.NewString())
	p := evWantProblem(t, s.do(t, http.MethodPost, "/hooks/registry", bytes.NewReader(nul), stdHeaders(t, uuid.NewString(), nul, "application/cloudevents+json")),
		http.StatusUnprocessableEntity, "invalid-request")
	if f := evFields(t, p); len(f) != 1 || f[0] != "id" {
		t.Errorf("structured id with NUL: fields %v, want [id]", f)
	}
	data := []byte(`{"repository": "web", "build_number": 2}`)
	h := stdHeaders(t, uuid.NewString(), data, "application/json")
	h["ce-specversion"], h["ce-id"], h["ce-source"], h["ce-type"] = "1.0", "b\xff"+uuid.NewString(), "/registry", "image.pushed"
	p = evWantProblem(t, s.do(t, http.MethodPost, "/hooks/registry", bytes.NewReader(data), h), http.StatusUnprocessableEntity, "invalid-request")
	if f := evFields(t, p); len(f) != 1 || f[0] != "id" {
		t.Errorf("binary ce-id not UTF-8: fields %v, want [id]", f)
	}
}

// TestHookCloudEventHeaders: in binary mode the ce-* headers are
// percent-decoded (the CloudEvents HTTP binding percent-encodes what is not
// printable ASCII) and must then be valid UTF-8 without NUL; specversion is
// 1.0 in either mode.
func TestHookCloudEventHeaders(t *testing.T) {
	t.Parallel()
	s := hookStack(t)
	repo := uuid.NewString()[:8]
	send := func(specversion, source string, build int) *evResponse {
		data := fmt.Appendf(nil, `{"repository": %q, "build_number": %d}`, repo, build)
		h := stdHeaders(t, uuid.NewString(), data, "application/json")
		h["ce-specversion"], h["ce-id"], h["ce-source"], h["ce-type"] = specversion, uuid.NewString(), source, "image.pushed"
		return s.do(t, http.MethodPost, "/hooks/registry", bytes.NewReader(data), h)
	}
	r := send("1.0", "/registry/caf%C3%A9%20bar", 1)
	evWantStatus(t, r, http.StatusAccepted)
	var stored string
	id := r.json(t)["delivery"].(map[string]any)["id"].(string)
	if err := s.pool.QueryRow(t.Context(), `SELECT body::jsonb->>'source' FROM converge_deliveries WHERE id = $1`, id).Scan(&stored); err != nil || stored != "/registry/café bar" {
		t.Errorf("ce-source stored as %q (%v), want it percent-decoded: /registry/café bar", stored, err)
	}
	for _, x := range []struct{ specversion, source, field string }{
		{"1.0", "/registry/\xff", "source"},
		{"1.0", "/registry/%FF", "source"},
		{"1.0", "/registry/%00", "source"},
		{"1.0", "/registry/%zz", "source"},
		{"0.3", "/registry", "specversion"},
		{"banana", "/registry", "specversion"},
	} {
		p := evWantProblem(t, send(x.specversion, x.source, 2), http.StatusUnprocessableEntity, "invalid-request")
		if f := evFields(t, p); len(f) != 1 || f[0] != x.field {
			t.Errorf("specversion %q, source %q: fields %v, want [%s]", x.specversion, x.source, f, x.field)
		}
	}
	structured := fmt.Appendf(nil, `{"specversion": "2.0", "id": %q, "source": "/registry", "type": "image.pushed", "data": {"repository": %q, "build_number": 3}}`, uuid.NewString(), repo)
	p := evWantProblem(t, s.do(t, http.MethodPost, "/hooks/registry", bytes.NewReader(structured), stdHeaders(t, uuid.NewString(), structured, "application/cloudevents+json")),
		http.StatusUnprocessableEntity, "invalid-request")
	if f := evFields(t, p); len(f) != 1 || f[0] != "specversion" {
		t.Errorf("structured specversion 2.0: fields %v, want [specversion]", f)
	}
	if n := hookEvents(t, s, "staging/"+repo); n != 1 {
		t.Errorf("%d events for the stream, want the one valid delivery's", n)
	}
}

// TestContentEncodingRefused: converge decodes no content coding, so a
// body sent gzip-encoded (or with any coding but identity) is 415, to the
// API and to a hook alike, and writes nothing; identity is the body as is.
func TestContentEncodingRefused(t *testing.T) {
	t.Parallel()
	s := hookStack(t)
	repo := hookRepo()
	event := fmt.Sprintf(`{"kind":"build","resource":%q,"version":1}`, repo)
	for _, ce := range []string{"gzip", "br", "deflate, gzip"} {
		h := map[string]string{"Content-Type": "application/json", "Content-Encoding": ce}
		evWantProblem(t, s.do(t, http.MethodPost, "/v1/events", strings.NewReader(event), h), http.StatusUnsupportedMediaType, "unsupported-media-type")
		id := uuid.NewString()
		body := githubPush(repo, "refs/heads/main", "abc")
		gh := map[string]string{"Authorization": "", "Content-Type": "application/json", "Content-Encoding": ce, "X-GitHub-Event": "push", "X-GitHub-Delivery": id}
		gh["X-Hub-Signature-256"] = source.SignGitHub([]byte(hookGitHubSecret), body)
		evWantProblem(t, s.do(t, http.MethodPost, "/hooks/github", bytes.NewReader(body), gh), http.StatusUnsupportedMediaType, "unsupported-media-type")
		if n := hookDeliveries(t, s, id); n != 0 {
			t.Errorf("Content-Encoding %s: %d delivery rows, want none", ce, n)
		}
	}
	if n := hookEvents(t, s, repo); n != 0 {
		t.Errorf("%d events accepted with a content coding, want none", n)
	}
	evWantStatus(t, s.do(t, http.MethodPost, "/v1/events", strings.NewReader(event), map[string]string{"Content-Type": "application/json", "Content-Encoding": "identity"}), http.StatusAccepted)
}
