package api_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/go-chi/chi/v5/middleware"

	"github.com/converge-run/converge/api"
)

// FuzzRequestIDHeader sends requests with any X-Request-Id and any other
// header value through api.RequestID and api.LimitHeaders, the first
// middleware of every request. It never panics; the id answered is always
// one the audit log may record (1–128 of [A-Za-z0-9._:-]), it is the one
// sent exactly when that one is valid, and the handler sees the same id;
// headers over api.MaxHeaderBytes are a 431 problem before the handler.
func FuzzRequestIDHeader(f *testing.F) {
	for _, seed := range [][2]string{
		{"req-1", "x"}, {"", ""}, {"a\x00b", "v"}, {strings.Repeat("r", 129), "v"}, {strings.Repeat("r", 128), "v"},
		{"id with space", "\xed\xa0\x80"}, {"01a2353f-defa-7a41-af4d-206330465d9b", strings.Repeat("h", 70<<10)},
		{"<script>", "\r\n"}, {"ünïcode", "ok"},
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, id, value string) {
		var seen string
		called := false
		h := api.RequestID(api.LimitHeaders(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			called = true
			seen = middleware.GetReqID(r.Context())
			w.WriteHeader(http.StatusNoContent)
		})))
		req := httptest.NewRequest(http.MethodGet, "/v1/events", nil)
		req.Header["X-Request-Id"] = []string{id}
		req.Header["X-Other"] = []string{value}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		got := w.Header().Get("X-Request-Id")
		if !api.ValidRequestID(got) {
			t.Fatalf("answered X-Request-Id %q is not a valid id", got)
		}
		if (got == id) != api.ValidRequestID(id) {
			t.Fatalf("sent %q, answered %q: kept must mean valid", id, got)
		}
		over := len(id)+len(value) > api.MaxHeaderBytes
		switch {
		case w.Code == http.StatusRequestHeaderFieldsTooLarge:
			if called {
				t.Fatal("431 after the handler ran")
			}
			var p api.Problem
			if w.Header().Get("Content-Type") != "application/problem+json" || json.Unmarshal(w.Body.Bytes(), &p) != nil || p.Status != 431 {
				t.Fatalf("431 without a problem body: %q", w.Body.String())
			}
		case over:
			t.Fatalf("%d bytes of headers answered %d", len(id)+len(value), w.Code)
		case !called || seen != got:
			t.Fatalf("handler called %v with id %q, answered %q", called, seen, got)
		}
	})
}

// FuzzCheckReason: a reason is taken exactly when PostgreSQL can store it
// as text and the spec allows it (valid UTF-8, no NUL, at most 1000
// characters), so an operator action's audit insert never fails on it.
func FuzzCheckReason(f *testing.F) {
	for _, seed := range []string{"", "upstream fixed", "a\x00b", "\xed\xa0\x80", "\xff", strings.Repeat("é", 1000), strings.Repeat("é", 1001)} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, reason string) {
		err := api.CheckReason(reason)
		storable := utf8.ValidString(reason) && !strings.ContainsRune(reason, 0) && utf8.RuneCountInString(reason) <= 1000
		if (err == nil) != storable {
			t.Fatalf("CheckReason(%q) = %v; storable and allowed: %v", reason, err, storable)
		}
		if err != nil {
			fuzzAppError(t, err, "invalid-request")
		}
	})
}
