package api_test

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/converge-run/converge/test/pgtest"
)

// TestQuarantineListPages pages GET /v1/quarantine as every list pages
// (SPEC §4): {"items", "next_cursor"}, newest first, limit 1–500 with
// next_cursor null on the last page, and every stream on exactly one page,
// two quarantined at the same moment included.
func TestQuarantineListPages(t *testing.T) {
	t.Parallel()
	s := evNewStack(t, pgtest.NewDatabase(t))
	base := time.Date(2026, 11, 1, 12, 0, 0, 123456000, time.UTC)
	since := map[string]time.Time{
		"app/a": base, "app/b": base.Add(time.Minute), "app/c": base.Add(time.Minute),
		"app/d": base.Add(2 * time.Minute), "app/e": base.Add(-time.Hour),
	}
	for r, at := range since {
		evWantStatus(t, s.post(t, evBody("build", r, 1, `{}`)), http.StatusAccepted)
		if _, err := s.pool.Exec(t.Context(), `UPDATE converge_streams SET failed_streak = 2, quarantined_at = $2
			WHERE kind = 'build' AND resource = $1`, r, at); err != nil {
			t.Fatal(err)
		}
	}
	type page struct {
		Items []struct {
			Kind, Resource string
			Since          time.Time
		} `json:"items"`
		NextCursor *string `json:"next_cursor"`
	}
	get := func(path string) (page, map[string]json.RawMessage) {
		t.Helper()
		r := s.get(t, path)
		evWantStatus(t, r, http.StatusOK)
		var p page
		var raw map[string]json.RawMessage
		if err := json.Unmarshal(r.body, &p); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(r.body, &raw); err != nil {
			t.Fatal(err)
		}
		return p, raw
	}

	// One page by default, with next_cursor present and null.
	all, raw := get("/v1/quarantine")
	if string(raw["next_cursor"]) != "null" || len(all.Items) != 5 {
		t.Fatalf("default page: next_cursor %s, %d items, want null and 5", raw["next_cursor"], len(all.Items))
	}
	var order []string
	for _, it := range all.Items {
		order = append(order, it.Resource)
		if !it.Since.Equal(since[it.Resource]) {
			t.Errorf("%s since %s, want %s", it.Resource, it.Since, since[it.Resource])
		}
	}
	// Newest first; the two of the same moment by resource, descending.
	if want := []string{"app/d", "app/c", "app/b", "app/a", "app/e"}; !slices.Equal(order, want) {
		t.Errorf("order %v, want %v", order, want)
	}

	// Pages of two: 2, 2, 1, the same streams in the same order.
	var paged []string
	path := "/v1/quarantine?limit=2"
	for n := 0; ; n++ {
		p, _ := get(path)
		for _, it := range p.Items {
			paged = append(paged, it.Resource)
		}
		if want := []int{2, 2, 1}[min(n, 2)]; len(p.Items) != want {
			t.Fatalf("page %d has %d items, want %d", n+1, len(p.Items), want)
		}
		if p.NextCursor == nil {
			if n != 2 {
				t.Fatalf("next_cursor null after page %d, want after page 3", n+1)
			}
			break
		}
		if n == 2 {
			t.Fatalf("page 3 (the last) has next_cursor %q", *p.NextCursor)
		}
		path = "/v1/quarantine?limit=2&cursor=" + *p.NextCursor
	}
	if !slices.Equal(paged, order) {
		t.Errorf("paged %v, want %v", paged, order)
	}

	// limit and cursor are checked like every list's.
	for _, q := range []string{"limit=0", "limit=501", "limit=x", "limit=", "cursor=%21%21", "cursor=" + base64.RawURLEncoding.EncodeToString([]byte("short")),
		"cursor=" + base64.RawURLEncoding.EncodeToString(append(make([]byte, 8), "build-no-nul"...)), "status=open"} {
		evWantProblem(t, s.get(t, "/v1/quarantine?"+q), http.StatusUnprocessableEntity, "invalid-request")
	}
}
