package api_test

import (
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"

	"github.com/converge-run/converge/api"
	"github.com/converge-run/converge/test/pgtest"
)

// TestOpenAPICoversRoutes checks the OpenAPI document against the router:
// every /v1 route is documented with its method and role, and every
// documented operation exists.
func TestOpenAPICoversRoutes(t *testing.T) {
	t.Parallel()
	var doc struct {
		OpenAPI string                               `json:"openapi"`
		Paths   map[string]map[string]map[string]any `json:"paths"`
	}
	if err := json.Unmarshal(api.OpenAPI(), &doc); err != nil {
		t.Fatalf("openapi.json is not JSON: %v", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Fatalf("openapi = %q, want 3.x", doc.OpenAPI)
	}
	srv := api.New(api.Config{})
	roles := srv.RouteRoles()
	seen := map[string]bool{}
	err := chi.Walk(srv.Routes(), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		// /hooks/{source} is documented too; it takes no token (the
		// signature authenticates), so it has no role.
		if !strings.HasPrefix(route, "/v1/") && !strings.HasPrefix(route, "/hooks/") {
			return nil
		}
		path := openAPIPath(route)
		key := method + " " + route
		seen[method+" "+path] = true
		op, ok := doc.Paths[path][strings.ToLower(method)]
		if !ok {
			t.Errorf("%s is routed but not in openapi.json", key)
			return nil
		}
		if strings.HasPrefix(route, "/hooks/") {
			if role, ok := op["x-converge-role"]; ok {
				t.Errorf("%s: openapi.json says role %v, but a hook takes no token", key, role)
			}
			return nil
		}
		if got, want := op["x-converge-role"], string(roles[key]); got != want {
			t.Errorf("%s: openapi.json says role %v, the router requires %q", key, got, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for path, ops := range doc.Paths {
		for method := range ops {
			if !seen[strings.ToUpper(method)+" "+path] {
				t.Errorf("openapi.json documents %s %s, which is not routed", strings.ToUpper(method), path)
			}
		}
	}
}

// openAPIPath is the documented path of a router pattern: a resource key
// holds slashes, so a route takes it as the wildcard, and the release of a
// quarantined stream reads its /release off the end of it
// (handleQuarantineRelease). TestOpenAPIWildcardPaths checks the documented
// paths reach their handlers.
func openAPIPath(route string) string {
	if route == "/v1/quarantine/{kind}/*" {
		return "/v1/quarantine/{kind}/{resource}/release"
	}
	return strings.Replace(route, "/*", "/{resource}", 1)
}

// TestOpenAPIWildcardPaths sends each documented operation whose path
// holds a resource key, filled with a stream that exists, to the server:
// the router and the handler take it (no 404 or 405), so the document
// names the path the handler reads.
func TestOpenAPIWildcardPaths(t *testing.T) {
	t.Parallel()
	var doc struct {
		Paths map[string]map[string]any `json:"paths"`
	}
	if err := json.Unmarshal(api.OpenAPI(), &doc); err != nil {
		t.Fatal(err)
	}
	s := evNewStack(t, "")
	resource := "openapi/" + uuid.NewString()
	evWantStatus(t, s.post(t, evBody("build", resource, 1, "")), http.StatusAccepted)
	n := 0
	for path, ops := range doc.Paths {
		if !strings.Contains(path, "{resource}") {
			continue
		}
		filled := strings.NewReplacer("{kind}", "build", "{resource}", resource).Replace(path)
		for method := range ops {
			method = strings.ToUpper(method)
			var body io.Reader
			if method == http.MethodPost {
				body = strings.NewReader(`{}`)
			}
			r := s.do(t, method, filled, body, map[string]string{"Content-Type": "application/json"})
			if r.status == http.StatusNotFound || r.status == http.StatusMethodNotAllowed {
				t.Errorf("%s %s (documented %s): %d %s", method, filled, path, r.status, r.body)
			}
			n++
		}
	}
	if n < 2 {
		t.Errorf("%d operations with a resource key in the document, want at least 2", n)
	}
}

// TestOpenAPIStatuses walks the router and checks that each /v1 (and
// /hooks) operation documents every status its handler and the middleware in
// front of it can send: 401, 429, 431 and 500 everywhere; on POST the
// body's 400, 413, 415 and 422; 404 where the path names something; 422
// where there is a query; and every operation has an operationId, tags and
// a description, with a problem body for each error status and the
// headers of its 429.
func TestOpenAPIStatuses(t *testing.T) {
	t.Parallel()
	var doc struct {
		Servers []any `json:"servers"`
		Paths   map[string]map[string]struct {
			OperationID string           `json:"operationId"`
			Tags        []string         `json:"tags"`
			Description string           `json:"description"`
			Parameters  []map[string]any `json:"parameters"`
			Responses   map[string]struct {
				Content map[string]any `json:"content"`
				Headers map[string]any `json:"headers"`
			} `json:"responses"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(api.OpenAPI(), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Servers) == 0 {
		t.Error("openapi.json has no servers")
	}
	ids := map[string]string{}
	err := chi.Walk(api.New(api.Config{}).Routes(), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		// /hooks/{source} too: its signature check is its 401, and the
		// edge's 429, 431 and 500 are its as well.
		if !strings.HasPrefix(route, "/v1/") && !strings.HasPrefix(route, "/hooks/") {
			return nil
		}
		path := openAPIPath(route)
		op, ok := doc.Paths[path][strings.ToLower(method)]
		if !ok {
			return nil // TestOpenAPICoversRoutes reports it
		}
		key := method + " " + path
		if op.OperationID == "" || len(op.Tags) == 0 || op.Description == "" {
			t.Errorf("%s: operationId %q, tags %v, description %q: want all three", key, op.OperationID, op.Tags, op.Description)
		}
		if other, dup := ids[op.OperationID]; dup {
			t.Errorf("%s: operationId %q is %s's too", key, op.OperationID, other)
		}
		ids[op.OperationID] = key
		want := []string{"401", "429", "431", "500", "503"}
		if method == http.MethodPost {
			want = append(want, "400", "413", "415", "422")
		}
		if strings.Contains(path, "{") {
			want = append(want, "404")
		}
		if strings.HasPrefix(path, "/v1/") {
			// A list's query is checked, and any other route refuses
			// one (Server.noQuery).
			want = append(want, "422")
		}
		for _, code := range want {
			if _, ok := op.Responses[code]; !ok {
				t.Errorf("%s can answer %s; openapi.json does not say so", key, code)
			}
		}
		for code, r := range op.Responses {
			if code >= "400" && r.Content["application/problem+json"] == nil {
				t.Errorf("%s %s: no application/problem+json body", key, code)
			}
		}
		// SPEC §4: a 429 carries Retry-After and the RateLimit-* headers.
		for _, h := range []string{"Retry-After", "RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"} {
			if _, ok := op.Responses["429"].Headers[h]; !ok {
				t.Errorf("%s 429: header %s is not documented", key, h)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestOpenAPIQueryAsStrictAsServer sends every list operation's query
// parameters, as the document describes them, to the server (SPEC §4:
// schemas as strict as the server): each value of an enum and each
// boundary of a limit is taken (200); a value the document refuses (not in
// the enum, not matching the pattern, over maxLength, outside
// minimum/maximum, not a date-time, empty where allowEmptyValue does not
// say that an empty value is no filter, as the dashboard's forms send it)
// is 422 naming the parameter, so a client that validates against the
// document and the server agree.
func TestOpenAPIQueryAsStrictAsServer(t *testing.T) {
	t.Parallel()
	type schema struct {
		Ref       string `json:"$ref"`
		Enum      []any  `json:"enum"`
		Pattern   string `json:"pattern"`
		MinLength *int   `json:"minLength"`
		MaxLength *int   `json:"maxLength"`
		Minimum   *int   `json:"minimum"`
		Maximum   *int   `json:"maximum"`
		Format    string `json:"format"`
	}
	var doc struct {
		Paths map[string]map[string]struct {
			Parameters []struct {
				Name       string `json:"name"`
				In         string `json:"in"`
				AllowEmpty bool   `json:"allowEmptyValue"`
				Schema     schema `json:"schema"`
			} `json:"parameters"`
		} `json:"paths"`
		Components struct {
			Schemas map[string]schema `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(api.OpenAPI(), &doc); err != nil {
		t.Fatal(err)
	}
	s := evNewStack(t, "")
	n := 0
	for path, ops := range doc.Paths {
		op, ok := ops["get"]
		if !ok || strings.Contains(path, "{") {
			continue
		}
		for _, p := range op.Parameters {
			if p.In != "query" || p.Name == "cursor" {
				continue
			}
			sc := p.Schema
			if sc.Ref != "" {
				sc = doc.Components.Schemas[strings.TrimPrefix(sc.Ref, "#/components/schemas/")]
			}
			var re *regexp.Regexp
			if sc.Pattern != "" {
				re = regexp.MustCompile(sc.Pattern)
			}
			// takes says whether the document takes v as the parameter.
			takes := func(v string) bool {
				if v == "" && p.AllowEmpty {
					return true
				}
				if sc.Enum != nil {
					return slices.Contains(sc.Enum, any(v))
				}
				if sc.Minimum != nil {
					n, err := strconv.Atoi(v)
					return err == nil && n >= *sc.Minimum && (sc.Maximum == nil || n <= *sc.Maximum)
				}
				if sc.Format == "date-time" {
					_, err := time.Parse(time.RFC3339, v)
					return err == nil
				}
				return (re == nil || re.MatchString(v)) &&
					(sc.MinLength == nil || len(v) >= *sc.MinLength) && (sc.MaxLength == nil || len(v) <= *sc.MaxLength)
			}
			values := []string{"", "Not a value!", "zz-not-a-value"}
			for _, e := range sc.Enum {
				values = append(values, e.(string))
			}
			for _, b := range []*int{sc.MinLength, sc.MaxLength} {
				if b != nil {
					values = append(values, strings.Repeat("a", *b), strings.Repeat("a", *b+1))
				}
			}
			for _, b := range []*int{sc.Minimum, sc.Maximum} {
				if b != nil {
					values = append(values, strconv.Itoa(*b-1), strconv.Itoa(*b), strconv.Itoa(*b+1))
				}
			}
			if sc.Format == "date-time" {
				values = append(values, "2025-01-31T15:04:05Z")
			}
			for _, v := range values {
				n++
				target := path + "?" + url.Values{p.Name: {v}}.Encode()
				r := s.get(t, target)
				switch want := takes(v); {
				case want && r.status != http.StatusOK:
					t.Errorf("GET %s: the document takes %s=%q, the server answers %d %s", target, p.Name, v, r.status, r.body)
				case !want && r.status != http.StatusUnprocessableEntity:
					t.Errorf("GET %s: the document refuses %s=%q, the server answers %d", target, p.Name, v, r.status)
				case !want && !slices.Contains(evFields(t, r.json(t)), p.Name):
					t.Errorf("GET %s: 422 %s, want the field %q named", target, r.body, p.Name)
				}
			}
		}
	}
	if n < 40 {
		t.Errorf("%d query values checked, want the lists' parameters", n)
	}

	// A list's status filter documents every status its items can have
	// (the server takes each of them, checked above).
	var raw map[string]any
	if err := json.Unmarshal(api.OpenAPI(), &raw); err != nil {
		t.Fatal(err)
	}
	schemas := raw["components"].(map[string]any)["schemas"].(map[string]any)
	deref := func(v any) map[string]any {
		m, _ := v.(map[string]any)
		if ref, ok := m["$ref"].(string); ok {
			m, _ = schemas[strings.TrimPrefix(ref, "#/components/schemas/")].(map[string]any)
		}
		return m
	}
	pick := func(v any, keys ...string) any {
		for _, k := range keys {
			v = deref(v)[k]
		}
		return v
	}
	for path, ops := range raw["paths"].(map[string]any) {
		get, ok := pick(ops, "get").(map[string]any)
		if !ok || strings.Contains(path, "{") {
			continue
		}
		page := pick(get, "responses", "200", "content", "application/json", "schema")
		statuses, _ := pick(page, "properties", "items", "items", "properties", "status", "enum").([]any)
		params, _ := get["parameters"].([]any)
		for _, p := range params {
			if pick(p, "name") != "status" {
				continue
			}
			filter, _ := pick(p, "schema", "enum").([]any)
			for _, st := range statuses {
				if !slices.Contains(filter, st) {
					t.Errorf("GET %s: an item's status may be %v, the status parameter's enum %v lacks it", path, st, filter)
				}
			}
		}
	}
}

// TestOpenAPIBodiesAsStrictAsServer sends request bodies whose fields sit
// on either side of the document's limits (a name's pattern, the version's
// minimum and maximum, a duration's pattern) and checks that the document
// and the server agree (SPEC §4: schemas as strict as the server): a value
// the schema refuses is 422 naming the field, and a value it takes is not.
func TestOpenAPIBodiesAsStrictAsServer(t *testing.T) {
	t.Parallel()
	type property struct {
		Pattern   string       `json:"pattern"`
		Enum      []any        `json:"enum"`
		MaxLength *int         `json:"maxLength"`
		Format    string       `json:"format"`
		AnyOf     []property   `json:"anyOf"`
		Minimum   *json.Number `json:"minimum"`
		Maximum   *json.Number `json:"maximum"`
	}
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Properties map[string]property `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	dec := json.NewDecoder(strings.NewReader(string(api.OpenAPI())))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		t.Fatal(err)
	}
	// valid says whether p takes v, as far as the keywords used here go.
	var valid func(p property, v any) bool
	valid = func(p property, v any) bool {
		if p.Enum != nil && !slices.Contains(p.Enum, v) {
			return false
		}
		if p.AnyOf != nil && !slices.ContainsFunc(p.AnyOf, func(q property) bool { return valid(q, v) }) {
			return false
		}
		switch v := v.(type) {
		case string:
			if p.Format == "date-time" {
				if _, err := time.Parse(time.RFC3339, v); err != nil {
					return false
				}
			}
			return (p.Pattern == "" || regexp.MustCompile(p.Pattern).MatchString(v)) &&
				(p.MaxLength == nil || utf8.RuneCountInString(v) <= *p.MaxLength)
		case json.Number:
			n, _ := new(big.Int).SetString(v.String(), 10)
			for _, b := range []struct {
				bound *json.Number
				sign  int
			}{{p.Minimum, -1}, {p.Maximum, 1}} {
				if b.bound != nil {
					limit, _ := new(big.Int).SetString(b.bound.String(), 10)
					if n.Cmp(limit) == b.sign {
						return false
					}
				}
			}
			return true
		}
		t.Fatalf("value %v", v)
		return false
	}
	// takes says whether the document takes value (JSON text) as the
	// property (a property of the bulk filter when field is filter.x).
	takes := func(schema, field, value string) bool {
		t.Helper()
		if f, ok := strings.CutPrefix(field, "filter."); ok {
			schema, field = "DeadLetterFilter", f
		}
		p, ok := doc.Components.Schemas[schema].Properties[field]
		if !ok {
			t.Fatalf("%s.%s is not in the document", schema, field)
		}
		var v any
		d := json.NewDecoder(strings.NewReader(value))
		d.UseNumber()
		if err := d.Decode(&v); err != nil {
			t.Fatal(err)
		}
		return valid(p, v)
	}
	// Its own database: the events it accepts do not move the row
	// counts of the tests that check a refusal writes nothing.
	s := evNewStack(t, pgtest.NewDatabase(t))
	resource := "strict/" + uuid.NewString()
	n := 0
	body := func(kind, workflow string) func(field, value string) (string, string) {
		return func(field, value string) (string, string) {
			n++
			f := map[string]string{kind: `"` + workflow + `"`, "resource": `"` + resource + "-" + strconv.Itoa(n) + `"`, "version": "1"}
			f[field] = value
			return fmt.Sprintf(`{%q:%s,"resource":%s,"version":%s}`, kind, f[kind], f["resource"], f["version"]), field
		}
	}
	event, workflowRun := body("kind", "build"), body("workflow", "release")
	purge := func(field, value string) (string, string) {
		return `{"dry_run":true,"older_than":` + value + `}`, field
	}
	filter := func(field, value string) (string, string) {
		return `{"dry_run":true,"filter":{"` + strings.TrimPrefix(field, "filter.") + `":` + value + `}}`, field
	}
	cases := []struct {
		path, schema, field string
		make                func(field, value string) (string, string)
		values              []string
	}{
		{"/v1/events", "EventSubmission", "kind", event, []string{`"build"`, `"BUILD"`, `"b uild"`, `"1build"`, `""`}},
		{"/v1/events", "EventSubmission", "version", event, []string{`1`, `0`, `-1`, `9223372036854775807`, `9223372036854775808`}},
		{"/v1/workflow-runs", "WorkflowRunStart", "workflow", workflowRun, []string{`"release"`, `"Release"`, `"re lease"`, `""`}},
		{"/v1/workflow-runs", "WorkflowRunStart", "version", workflowRun, []string{`1`, `0`, `9223372036854775807`, `9223372036854775808`}},
		{"/v1/dead-letters/purge", "PurgeRequest", "older_than", purge, []string{`"720h"`, `"1h30m"`, `"1.5h"`, `"0"`, `"+5m"`,
			`"1d"`, `"30d"`, `"1d12h"`, `"2d+1h"`, `"0d"`, `"d"`, `"+1d"`, `"1dd"`, `"1d-1h"`, `"-1h"`, `""`, `"h"`, `"5"`, `"5 h"`}},
		// The bulk filter: the list's fields, an empty one no filter.
		{"/v1/dead-letters/redrive", "BulkRequest", "filter.status", filter, []string{`"open"`, `"discarded"`, `""`, `"all"`, `"OPEN"`}},
		{"/v1/dead-letters/redrive", "BulkRequest", "filter.kind", filter, []string{`"deploy"`, `""`, `"Deploy"`, `"de ploy"`}},
		{"/v1/dead-letters/discard", "BulkRequest", "filter.resource", filter, []string{`"prod/"`, `""`, `"-prod"`, `"a b"`,
			`"` + strings.Repeat("r", 200) + `"`, `"` + strings.Repeat("r", 201) + `"`}},
		{"/v1/dead-letters/discard", "BulkRequest", "filter.reason", filter, []string{`"permanent_error"`, `""`, `"timeout"`}},
		{"/v1/dead-letters/discard", "BulkRequest", "filter.q", filter, []string{`"refused"`, `""`,
			`"` + strings.Repeat("ü", 200) + `"`, `"` + strings.Repeat("ü", 201) + `"`}},
		{"/v1/dead-letters/redrive", "BulkRequest", "filter.since", filter, []string{`"2025-01-31T15:04:05Z"`, `""`, `"yesterday"`, `"2025-01-31"`}},
		{"/v1/dead-letters/redrive", "BulkRequest", "filter.until", filter, []string{`"2025-01-31T15:04:05+01:00"`, `""`, `"2025-13-01T00:00:00Z"`}},
	}
	for _, c := range cases {
		for _, v := range c.values {
			b, field := c.make(c.field, v)
			r := s.do(t, http.MethodPost, c.path, strings.NewReader(b), map[string]string{"Content-Type": "application/json"})
			switch want := takes(c.schema, c.field, v); {
			case want && r.status == http.StatusUnprocessableEntity:
				t.Errorf("POST %s %s: the document takes %s %s, the server answers %d %s", c.path, b, c.field, v, r.status, r.body)
			case !want && r.status != http.StatusUnprocessableEntity:
				t.Errorf("POST %s %s: the document refuses %s %s, the server answers %d", c.path, b, c.field, v, r.status)
			case !want && !slices.Contains(evFields(t, r.json(t)), field):
				t.Errorf("POST %s %s: 422 %s, want %q named", c.path, b, r.body, field)
			}
		}
	}
}
