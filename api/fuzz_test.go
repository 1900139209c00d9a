package api_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/api"
)

// The fuzz targets need no database. Their seed corpora are in
// testdata/fuzz/<target>; `make fuzz` runs each for a few seconds.

// fuzzKinds are the configured kinds of the decoder fuzz target.
var fuzzKinds = converge.KindPolicies{"build": {Name: "build", MaxAttempts: 3}, "deploy": {Name: "deploy", MaxAttempts: 1}}

// fuzzAppError fails unless err is an *AppError with one of codes and a
// message that is valid UTF-8.
func fuzzAppError(t *testing.T, err error, codes ...string) {
	t.Helper()
	var appErr *converge.AppError
	if !errors.As(err, &appErr) {
		t.Fatalf("error %v (%T) is not an *AppError: it would be answered 500", err, err)
	}
	ok := false
	for _, c := range codes {
		ok = ok || appErr.Code == c
	}
	if !ok {
		t.Fatalf("error code %q, want one of %v (%v)", appErr.Code, codes, err)
	}
	if !utf8.ValidString(appErr.Message) {
		t.Fatalf("error message is not valid UTF-8: %q", appErr.Message)
	}
	for _, f := range appErr.Fields {
		if !utf8.ValidString(f.Field) || !utf8.ValidString(f.Message) {
			t.Fatalf("field error is not valid UTF-8: %q", f)
		}
	}
}

// FuzzDecodeEvent feeds POST /v1/events bodies to api.DecodeEvent, read
// through the same MaxBytesReader the handler uses. It never panics; it
// fails only with malformed-json, invalid-request or payload-too-large; and
// what it accepts is a configured kind, a valid resource key, a version of
// at least 1 and a JSON object payload within the limit.
func FuzzDecodeEvent(f *testing.F) {
	for _, seed := range []string{
		`{"kind":"build","resource":"app/web","version":1}`,
		`{"kind":"deploy","resource":"prod/payments","version":9223372036854775807,"payload":{"ref":"main","n":[1,2,{"a":null}]}}`,
		`{"kind":"build","resource":"app/web","version":1,"payload":{}}`,
		`{"kind":"build","resource":"app/web","version":0}`,
		`{"kind":"build","resource":"app/web","version":-1}`,
		`{"kind":"build","resource":"app/web","version":1.5}`,
		`{"kind":"build","resource":"app/web","version":1e3}`,
		`{"kind":"build","resource":"app/web","version":"1"}`,
		`{"kind":"build","resource":"app/web","version":99999999999999999999}`,
		`{"kind":"build","resource":"app/web","version":1,"payload":[1]}`,
		`{"kind":"build","resource":"app/web","version":1,"payload":"x"}`,
		`{"kind":"build","resource":"app/web","version":1,"payload":null}`,
		`{"kind":"build","resource":"app/web","version":1,"payload":{"a":"\u0000"}}`,
		`{"kind":"build","resource":"app/web","version":1,"extra":true}`,
		`{"kind":"nope","resource":"app/web","version":1}`,
		`{"kind":"build","resource":"' OR 1=1 --","version":1}`,
		`{"kind":"build","resource":"/leading","version":1}`,
		`{"kind":"build","resource":"app/web","version":1}{}`,
		`{"kind":"build","resource":"app/web","version":1} x`,
		`{"kind":"build","kind":"deploy","resource":"app/web","version":1}`,
		`{"KIND":"build","resource":"app/web","version":1}`,
		`{"kind":null,"resource":null,"version":null}`,
		`[]`, `null`, `""`, `{`, ``, "\xff\xfe", `{"kind":"build\u0000"}`,
		`{"kind":"` + strings.Repeat("é", 100) + `","resource":"app/web","version":1}`,
		`{"` + strings.Repeat("ü", 100) + `":1}`,
		`{"kind":"build","resource":"` + strings.Repeat("a", 201) + `","version":1}`,
		`{"kind":"build","resource":"app/web","version":1,"payload":{"e":"\ud83d\ude00","h":"\uD55C"}}`,
		`{"kind":"build","resource":"app/\ud800","version":1}`,
		`{"kind":"build","resource":"app/web","version":1,"payload":{"a":"\udc00"}}`,
		`{"kind":"\ud800","resource":"a","version":1,"payload":` + strings.Repeat("[", 300) + strings.Repeat("]", 300) + `}`,
	} {
		f.Add([]byte(seed))
	}
	const maxPayload = 512
	f.Fuzz(func(t *testing.T, body []byte) {
		r := http.MaxBytesReader(nil, io.NopCloser(bytes.NewReader(body)), maxPayload+16<<10)
		sub, err := api.DecodeEvent(r, fuzzKinds, maxPayload)
		if err != nil {
			if sub != nil {
				t.Fatalf("a submission and an error: %+v, %v", sub, err)
			}
			fuzzAppError(t, err, converge.EMALFORMED, converge.EINVALID, converge.ETOOLARGE)
			return
		}
		if _, ok := fuzzKinds[sub.Kind]; !ok {
			t.Fatalf("accepted kind %q", sub.Kind)
		}
		if err := converge.ValidateResource(sub.Resource); err != nil {
			t.Fatalf("accepted resource %q: %v", sub.Resource, err)
		}
		if sub.Version < 1 {
			t.Fatalf("accepted version %d", sub.Version)
		}
		if len(sub.Payload) > maxPayload {
			t.Fatalf("accepted a payload of %d bytes, over %d", len(sub.Payload), maxPayload)
		}
		var obj map[string]any
		if err := json.Unmarshal(sub.Payload, &obj); err != nil || obj == nil {
			t.Fatalf("accepted payload %q is not a JSON object: %v", sub.Payload, err)
		}
		if bytes.Contains(sub.Payload, []byte(`\u0000`)) {
			t.Fatalf("accepted payload with a NUL character: %q", sub.Payload)
		}
	})
}

// FuzzParseEventListParams feeds raw query strings to
// api.ParseEventListParams. It never panics and fails only with
// invalid-request; what it accepts is valid UTF-8 without NUL characters, a
// valid status and resource key, and a limit from 1 to 500.
func FuzzParseEventListParams(f *testing.F) {
	for _, seed := range []string{
		"", "kind=build", "kind=build&resource=app/web&status=failed&limit=500",
		"limit=0", "limit=501", "limit=-1", "limit=99999999999999999999", "limit=1e2", "limit=%20", "limit=",
		"status=done", "status=", "resource=%ff", "resource=a%00b", "kind=%ff", "kind=a%00", "kind=%27%20OR%201%3D1--",
		"cursor=AAAAAAAAAAAAAAAAAAAAAA", "cursor=not-a-cursor", "cursor=%ff", "cursor==",
		"kind=a&kind=b", "x=1", "%ff=1", "=1", "&&&", ";", "kind=build;limit=2", "%zz", "resource=" + strings.Repeat("a", 10<<10),
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, rawQuery string) {
		r := &http.Request{Method: http.MethodGet, URL: &url.URL{Path: "/v1/events", RawQuery: rawQuery}}
		p, err := api.ParseEventListParams(r)
		if err != nil {
			fuzzAppError(t, err, converge.EINVALID)
			return
		}
		for _, s := range []string{p.Kind, p.Resource, string(p.Status)} {
			if !utf8.ValidString(s) || strings.ContainsRune(s, 0) {
				t.Fatalf("accepted %q", s)
			}
		}
		if len(p.Kind) > 63 {
			t.Fatalf("accepted a kind of %d bytes", len(p.Kind))
		}
		if p.Resource != "" {
			if err := converge.ValidateResource(p.Resource); err != nil {
				t.Fatalf("accepted resource %q: %v", p.Resource, err)
			}
		}
		if p.Status != "" && !p.Status.Valid() {
			t.Fatalf("accepted status %q", p.Status)
		}
		if p.Limit < 1 || p.Limit > 500 {
			t.Fatalf("accepted limit %d", p.Limit)
		}
	})
}

// FuzzDecodeCursor feeds strings to api.DecodeCursor. It never panics, fails
// only with invalid-request, and a cursor it accepts stands for an id that
// EncodeCursor turns back into a cursor decoding to the same id.
func FuzzDecodeCursor(f *testing.F) {
	for _, seed := range []string{
		"", api.EncodeCursor(uuid.Nil), api.EncodeCursor(uuid.Must(uuid.NewV7())), "AAAAAAAAAAAAAAAAAAAAAB",
		"AAAAAAAAAAAAAAAAAAAAAA==", "AAAAAAAAAAAAAAAAAAAAA", "AAAAAAAAAAAAAAAAAAAAAAA", "////////////////////////",
		"________________________", "not a cursor", "\xff", "\x00", "' OR 1=1 --", strings.Repeat("A", 10<<10),
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, err := api.DecodeCursor(s)
		if err != nil {
			if id != nil {
				t.Fatalf("an id and an error: %v, %v", id, err)
			}
			fuzzAppError(t, err, converge.EINVALID)
			return
		}
		if s == "" {
			if id != nil {
				t.Fatalf("the empty cursor decoded to %v", id)
			}
			return
		}
		if id == nil {
			t.Fatalf("cursor %q: neither an id nor an error", s)
		}
		again, err := api.DecodeCursor(api.EncodeCursor(*id))
		if err != nil || again == nil || *again != *id {
			t.Fatalf("cursor %q: %v does not survive EncodeCursor: %v, %v", s, *id, again, err)
		}
	})
}

// fuzzKindName is what a configured kind's name looks like.
var fuzzKindName = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,62}$`)

// fuzzCheckFilter fails unless f is a filter that is safe to hand to the
// store: known enum values, a valid resource key, search text of at most
// 200 characters of valid UTF-8 without NUL, and times PostgreSQL can hold,
// in order.
func fuzzCheckFilter(t *testing.T, f converge.DeadLetterFilter) {
	t.Helper()
	if f.Status != "" && !f.Status.Valid() {
		t.Fatalf("accepted status %q", f.Status)
	}
	if f.Reason != "" && !f.Reason.Valid() {
		t.Fatalf("accepted reason %q", f.Reason)
	}
	if f.Kind != "" && !fuzzKindName.MatchString(f.Kind) {
		t.Fatalf("accepted kind %q", f.Kind)
	}
	if f.Resource != "" {
		if err := converge.ValidateResource(f.Resource); err != nil {
			t.Fatalf("accepted resource %q: %v", f.Resource, err)
		}
	}
	if f.Q != "" {
		if n := utf8.RuneCountInString(f.Q); !utf8.ValidString(f.Q) || strings.ContainsRune(f.Q, 0) || n > 200 {
			t.Fatalf("accepted q %q", f.Q)
		}
	}
	for _, at := range []*time.Time{f.Since, f.Until} {
		// RFC 3339 has years 0000-9999; a zone offset moves them by a day.
		if at != nil && (at.Year() < -1 || at.Year() > 10000) {
			t.Fatalf("accepted time %v", at)
		}
	}
	if f.Since != nil && f.Until != nil && f.Since.After(*f.Until) {
		t.Fatalf("accepted since %v after until %v", f.Since, f.Until)
	}
}

// FuzzParseDeadLetterFilter feeds the dead-letter filter parser (used by
// GET /v1/dead-letters and the bulk actions' "filter") with the values of
// a raw query string. It never panics, reports fields under the prefix, and
// what it accepts is safe to hand to the store.
func FuzzParseDeadLetterFilter(f *testing.F) {
	for _, seed := range []string{
		"", "status=open", "status=redriven&kind=build&resource=app/&reason=permanent_error&q=timeout",
		"since=2025-01-31T15:04:05Z&until=2025-02-01T00:00:00.123456789%2B02:00", "since=2025-02-01T00:00:00Z&until=2025-01-01T00:00:00Z",
		"since=0000-01-01T00:00:00Z", "until=9999-12-31T23:59:59.999999999Z", "since=2025-13-01T00:00:00Z", "since=yesterday",
		"status=OPEN", "status=x", "kind=Build", "kind=b%00", "kind=%ff", "resource=/x", "resource=a%20b", "reason=other",
		"q=ab", "q=%ff%fe%fd", "q=a%00bc", "q=" + strings.Repeat("é", 201), "q=%27%20OR%201%3D1%20--", "q=100%25_",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, rawQuery string) {
		q, _ := url.ParseQuery(rawQuery)
		filter, errs := api.ParseDeadLetterFilter(q.Get, "filter.")
		if len(errs) > 0 {
			for _, e := range errs {
				if !strings.HasPrefix(e.Field, "filter.") || e.Message == "" || !utf8.ValidString(e.Field+e.Message) {
					t.Fatalf("field error %+v", e)
				}
			}
			return
		}
		fuzzCheckFilter(t, filter)
	})
}

// FuzzParseDeadLetterListParams feeds raw query strings to
// api.ParseDeadLetterListParams, as FuzzParseEventListParams does for
// events.
func FuzzParseDeadLetterListParams(f *testing.F) {
	for _, seed := range []string{
		"", "status=open&limit=500", "cursor=" + api.EncodeDeadLetterCursor(converge.DeadLetterCursor{CreatedAt: time.Now(), ID: uuid.Max}),
		"cursor=" + strings.Repeat("9", 32), "cursor=gAAAAAAAAAD_____________________", "limit=0", "limit=501", "limit=1&limit=2",
		"x=1", "q=abc;limit=2", "since=2025-01-31T15:04:05Z&until=2025-01-31T15:04:05Z", "%zz",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, rawQuery string) {
		r := &http.Request{Method: http.MethodGet, URL: &url.URL{Path: "/v1/dead-letters", RawQuery: rawQuery}}
		p, err := api.ParseDeadLetterListParams(r)
		if err != nil {
			if p != nil {
				t.Fatalf("params and an error: %+v, %v", p, err)
			}
			fuzzAppError(t, err, converge.EINVALID)
			return
		}
		fuzzCheckFilter(t, p.DeadLetterFilter)
		if p.Limit < 1 || p.Limit > 500 {
			t.Fatalf("accepted limit %d", p.Limit)
		}
		if c := p.Cursor; c != nil && (c.CreatedAt.Year() < 1 || c.CreatedAt.Year() > 9999) {
			t.Fatalf("accepted a cursor at %v", c.CreatedAt)
		}
	})
}

// FuzzDecodeDeadLetterCursor feeds strings to api.DecodeDeadLetterCursor:
// it never panics, fails only with invalid-request, and what it accepts is
// a time PostgreSQL can hold that survives EncodeDeadLetterCursor.
func FuzzDecodeDeadLetterCursor(f *testing.F) {
	for _, seed := range []string{
		"", api.EncodeDeadLetterCursor(converge.DeadLetterCursor{CreatedAt: time.Unix(1700000000, 123456000), ID: uuid.Max}),
		strings.Repeat("9", 32), strings.Repeat("A", 32), strings.Repeat("_", 32), "gAAAAAAAAAD_____________________",
		"f_________8AAAAAAAAAAAAAAAAAAAAA", api.EncodeCursor(uuid.Max), "not a cursor", "\xff", "\x00",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := api.DecodeDeadLetterCursor(s)
		if err != nil {
			if c != nil {
				t.Fatalf("a cursor and an error: %+v, %v", c, err)
			}
			fuzzAppError(t, err, converge.EINVALID)
			return
		}
		if s == "" {
			if c != nil {
				t.Fatalf("the empty cursor decoded to %+v", c)
			}
			return
		}
		if c == nil {
			t.Fatalf("cursor %q: neither a cursor nor an error", s)
		}
		if y := c.CreatedAt.Year(); y < 1 || y > 9999 {
			t.Fatalf("cursor %q at %v, which PostgreSQL cannot hold", s, c.CreatedAt)
		}
		again, err := api.DecodeDeadLetterCursor(api.EncodeDeadLetterCursor(*c))
		if err != nil || again == nil || !again.CreatedAt.Equal(c.CreatedAt) || again.ID != c.ID {
			t.Fatalf("cursor %q: %+v does not survive EncodeDeadLetterCursor: %+v, %v", s, *c, again, err)
		}
	})
}

// FuzzDecodeDeadLetterBulk feeds bodies of POST /v1/dead-letters/redrive
// and /discard to api.DecodeDeadLetterBulk. It never panics, fails only with
// 4xx codes, and what it accepts is either 1 to 1000 ids or a safe filter,
// with a reason of at most 1000 characters without NUL.
func FuzzDecodeDeadLetterBulk(f *testing.F) {
	id := uuid.Must(uuid.NewV7()).String()
	for _, seed := range []string{
		`{"ids":["` + id + `"]}`, `{"ids":["` + id + `"],"dry_run":true,"reason":"flaky registry"}`,
		`{"filter":{"status":"open","kind":"build","resource":"app/","q":"timeout"}}`, `{"filter":{}}`,
		`{"ids":[]}`, `{"ids":["x"]}`, `{"ids":["{` + id + `}"]}`, `{"ids":["urn:uuid:` + id + `"]}`, `{"ids":[1]}`,
		`{"ids":["` + id + `"],"filter":{}}`, `{}`, ``, `null`, `[]`, `{"filter":{"nope":"1"}}`, `{"filter":{"kind":1}}`,
		`{"filter":{"since":"2025-02-01T00:00:00Z","until":"2025-01-01T00:00:00Z"}}`, `{"reason":"a\u0000b","ids":["` + id + `"]}`,
		`{"ids":["` + id + `"],"reason":"` + strings.Repeat("ü", 1001) + `"}`, `{"ids":["` + id + `"]} {}`, `{"ids":null}`, `{"filter":null}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r := httptest.NewRequest(http.MethodPost, "/v1/dead-letters/redrive", bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		p, reason, err := api.DecodeDeadLetterBulk(httptest.NewRecorder(), r)
		if err != nil {
			if p != nil {
				t.Fatalf("params and an error: %+v, %v", p, err)
			}
			fuzzAppError(t, err, converge.EMALFORMED, converge.EINVALID, converge.ETOOLARGE)
			return
		}
		switch {
		case p.Filter != nil && p.IDs != nil:
			t.Fatalf("accepted both ids and a filter: %+v", p)
		case p.Filter != nil:
			fuzzCheckFilter(t, *p.Filter)
		case len(p.IDs) < 1 || len(p.IDs) > converge.MaxDeadLetterBulk:
			t.Fatalf("accepted %d ids", len(p.IDs))
		}
		if utf8.RuneCountInString(reason) > 1000 || strings.ContainsRune(reason, 0) || !utf8.ValidString(reason) {
			t.Fatalf("accepted reason %q", reason)
		}
	})
}

// FuzzCheckPayloadJSON feeds JSON payloads (numbers, depth, surrogates,
// NULs) to api.CheckPayloadJSON and checks what it accepts against an
// independent reading: nesting at most 64, every number's exact plain
// decimal form (math/big) at most 64 characters, and no \u0000 escape.
func FuzzCheckPayloadJSON(f *testing.F) {
	for _, seed := range []string{
		`{}`, `{"n":1e63}`, `{"n":1e64}`, `{"n":-1e-61}`, `{"n":1e131071}`, `{"n":0.5e1}`, `{"n":1.50e-2}`,
		`{"n":` + strings.Repeat("9", 64) + `}`, `{"a":` + strings.Repeat("[", 63) + strings.Repeat("]", 63) + `}`,
		`{"a":` + strings.Repeat("[", 64) + strings.Repeat("]", 64) + `}`, `{"s":"\ud800"}`, `{"s":"\ud83d\ude00"}`,
		`{"s":"\u0000"}`, `{"s":"\\u0000"}`, `{"s":"\udc00\ud800"}`, `{"n":-0}`, `{"n":0e-100}`, `{"n":1E+2}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, p []byte) {
		if !json.Valid(p) {
			return
		}
		msg := api.CheckPayloadJSON(p)
		if msg != "" {
			return
		}
		dec := json.NewDecoder(bytes.NewReader(p))
		dec.UseNumber()
		depth := 0
		for {
			tok, err := dec.Token()
			if err != nil {
				break
			}
			switch v := tok.(type) {
			case json.Delim:
				if v == '{' || v == '[' {
					depth++
					if depth > api.MaxPayloadDepth {
						t.Fatalf("accepted nesting over %d: %q", api.MaxPayloadDepth, p)
					}
				} else {
					depth--
				}
			case json.Number:
				if fuzzPlainLen(t, string(v)) > api.MaxNumberChars {
					t.Fatalf("accepted number %s, plain form over %d", v, api.MaxNumberChars)
				}
			}
		}
		if bytes.Contains(p, []byte(`\u0000`)) && !bytes.Contains(p, []byte(`\\u0000`)) {
			t.Fatalf("accepted a NUL escape: %q", p)
		}
	})
}

// fuzzPlainLen is the length of n's exact plain decimal form, as
// PostgreSQL's numeric prints it (scale: the fraction digits less the
// exponent), worked out with math/big.
func fuzzPlainLen(t *testing.T, n string) int {
	t.Helper()
	mant, exp := n, 0
	if i := strings.IndexAny(n, "eE"); i >= 0 {
		mant = n[:i]
		e, err := strconv.Atoi(n[i+1:])
		if err != nil || e > 10000 || e < -10000 {
			return math.MaxInt
		}
		exp = e
	}
	frac := 0
	if i := strings.IndexByte(mant, '.'); i >= 0 {
		frac = len(mant) - i - 1
	}
	r, ok := new(big.Rat).SetString(n)
	if !ok {
		t.Fatalf("big.Rat cannot read %s", n)
	}
	s := r.FloatString(max(0, frac-exp))
	if r.Sign() == 0 && strings.HasPrefix(n, "-") {
		s = "-" + s
	}
	return len(s)
}
