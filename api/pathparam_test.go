package api_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestPathParamsPercentEncoded: a path parameter is decoded before it is
// used (SPEC §4, the key may contain /): a resource key percent-encoded in
// the path, its / as %2F, its @ and : as %40 and %3A, names the same stream
// as the key written plainly, and an id percent-encoded names its event.
func TestPathParamsPercentEncoded(t *testing.T) {
	t.Parallel()
	s := evNewStack(t, "")
	for _, res := range []string{"u@x:y", "pp/app/web"} {
		evWantStatus(t, s.post(t, evBody("build", res, 1, "")), http.StatusAccepted)
	}
	for _, x := range []struct{ path, resource string }{
		{"/v1/resources/build/u%40x%3Ay", "u@x:y"},
		{"/v1/resources/build/u@x:y", "u@x:y"},
		{"/v1/resources/build/pp%2Fapp%2Fweb", "pp/app/web"},
		{"/v1/resources/build/pp/app%2fweb", "pp/app/web"},
		{"/v1/resources/build/pp/app/web", "pp/app/web"},
	} {
		r := s.get(t, x.path)
		evWantStatus(t, r, http.StatusOK)
		if got := r.json(t)["resource"]; got != x.resource {
			t.Errorf("GET %s: resource %v, want %s", x.path, got, x.resource)
		}
	}
	// Decoded once only: %2541 is the characters %41, not a resource A.
	evWantProblem(t, s.get(t, "/v1/resources/build/pp%2541"), http.StatusNotFound, "not-found")
	evWantProblem(t, s.get(t, "/v1/resources/b%75ild/nope"), http.StatusNotFound, "not-found")

	// The release of a stream that is not quarantined is 409, not 404: the
	// key was read; x%2Frelease is a key, not the release action.
	rel := s.do(t, http.MethodPost, "/v1/quarantine/build/pp%2Fapp%2Fweb/release", nil, nil)
	evWantProblem(t, rel, http.StatusConflict, "not-quarantined")
	evWantProblem(t, s.do(t, http.MethodPost, "/v1/quarantine/build/pp%2Fapp%2Fweb%2Frelease", nil, nil), http.StatusNotFound, "not-found")

	// An id with an escaped character is the same id.
	r := s.post(t, evBody("build", "pp/id", 1, ""))
	evWantStatus(t, r, http.StatusAccepted)
	var acc struct {
		Event struct {
			ID string `json:"id"`
		} `json:"event"`
	}
	if err := json.Unmarshal(r.body, &acc); err != nil || acc.Event.ID == "" {
		t.Fatalf("accept answer %s: %v", r.body, err)
	}
	escaped := strings.Replace(acc.Event.ID, "-", "%2D", 1)
	evWantStatus(t, s.get(t, "/v1/events/"+escaped), http.StatusOK)
}
