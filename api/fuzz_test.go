package api_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/api"
)

// The fuzz targets need no database. Their seed corpora are in
// testdata/fuzz/<target>; `make fuzz` runs each for a few seconds.

// fuzzKinds are the configured kinds of the decoder fuzz target.
var fuzzKinds = map[string]api.KindPolicy{"build": {MaxAttempts: 3}, "deploy": {MaxAttempts: 1}}

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
