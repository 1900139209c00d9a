package api_test

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"
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
