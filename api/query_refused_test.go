package api_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/converge-run/converge/test/pgtest"
)

// TestQueryRefusedOutsideLists: a route that is not a list takes no query
// string. A parameter there is refused (422 naming it) before the handler
// runs, not ignored: POST /v1/dead-letters/purge?dry_run=true deletes
// nothing, and POST /v1/events?x=1 accepts nothing.
func TestQueryRefusedOutsideLists(t *testing.T) {
	t.Parallel()
	s := evNewStack(t, pgtest.NewDatabase(t))
	resource := "q/" + uuid.NewString()
	json := map[string]string{"Content-Type": "application/json"}
	for _, x := range []struct{ method, path, body, field string }{
		{http.MethodPost, "/v1/events?dry_run=true", `{"kind":"build","resource":"` + resource + `","version":1}`, "dry_run"},
		{http.MethodPost, "/v1/dead-letters/purge?dry_run=true", `{}`, "dry_run"},
		{http.MethodPost, "/v1/dead-letters/discard?dry_run=1", `{"ids":["` + uuid.NewString() + `"]}`, "dry_run"},
		{http.MethodGet, "/v1/events/" + uuid.NewString() + "?fields=all", ``, "fields"},
		{http.MethodGet, "/v1/resources/build/" + resource + "?x=1", ``, "x"},
		{http.MethodPost, "/v1/runs/" + uuid.NewString() + "/cancel?force=true", `{}`, "force"},
		{http.MethodPost, "/v1/events?%zz", `{"kind":"build","resource":"` + resource + `","version":1}`, "query"},
	} {
		r := s.do(t, x.method, x.path, strings.NewReader(x.body), json)
		p := evWantProblem(t, r, http.StatusUnprocessableEntity, "invalid-request")
		if fields := evFields(t, p); !slices.Equal(fields, []string{x.field}) {
			t.Errorf("%s %s: fields %v, want [%s]", x.method, x.path, fields, x.field)
		}
	}
	var events int
	if err := s.pool.QueryRow(t.Context(), `SELECT count(*) FROM converge_events WHERE resource = $1`, resource).Scan(&events); err != nil {
		t.Fatal(err)
	}
	if events != 0 {
		t.Errorf("%d events accepted through a refused query", events)
	}
	// The lists still take theirs, and the same routes without a query
	// work.
	evWantStatus(t, s.get(t, "/v1/events?kind=build&limit=1"), http.StatusOK)
	evWantStatus(t, s.post(t, `{"kind":"build","resource":"`+resource+`","version":1}`), http.StatusAccepted)
}
