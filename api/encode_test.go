package api_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestAnswerNotHTMLEscaped: what is returned is never much larger than what
// was sent (SPEC §4): a payload of '<', '>' and '&' comes back as those
// bytes, not as \u003c each (encoding/json's HTML escaping, six times the
// size), in the accept answer and in GET /v1/events/{id}.
func TestAnswerNotHTMLEscaped(t *testing.T) {
	t.Parallel()
	s := evNewStack(t, "")
	text := strings.Repeat("<>&", 1000)
	body := evBody("build", "esc/web", 1, `{"s":"`+text+`"}`)
	r := s.post(t, body)
	evWantStatus(t, r, http.StatusAccepted)
	if max := len(body)*6/5 + 1024; len(r.body) > max {
		t.Errorf("accept answer is %d bytes for a %d-byte request (at most %d)", len(r.body), len(body), max)
	}
	var acc struct {
		Event struct {
			ID      string          `json:"id"`
			Payload json.RawMessage `json:"payload"`
		} `json:"event"`
	}
	if err := json.Unmarshal(r.body, &acc); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(acc.Event.Payload), text) {
		t.Errorf("payload not returned as sent: %.80s", acc.Event.Payload)
	}
	g := s.get(t, "/v1/events/"+acc.Event.ID)
	evWantStatus(t, g, http.StatusOK)
	if max := len(body)*6/5 + 1024; len(g.body) > max || !strings.Contains(string(g.body), text) {
		t.Errorf("GET answer is %d bytes for a %d-byte request (at most %d): %.80s", len(g.body), len(body), max, g.body)
	}
	// A problem's detail is not escaped either.
	p := s.get(t, "/v1/resources/build/%3C%26%3E")
	evWantProblem(t, p, http.StatusNotFound, "not-found")
	if !strings.Contains(string(p.body), `<&>`) {
		t.Errorf("problem detail escaped: %s", p.body)
	}
}
