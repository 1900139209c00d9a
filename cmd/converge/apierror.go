package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/api"
)

// The error answers of the API as the CLI reports them: a problem body as
// the API wrote it, or, for an answer that is not one (a proxy's HTML 502,
// JSON of another shape, no body), a problem made of what came.

// problemError is an API error answer.
type problemError struct {
	Status int
	Type   string
	Title  string
	Detail string
	Fields []converge.FieldError
}

// Error is the problem's detail (else its title), its type and status, and
// a line per field error.
func (e *problemError) Error() string {
	slug := strings.TrimPrefix(e.Type, "urn:converge:problem:")
	var b strings.Builder
	if e.Detail != "" {
		b.WriteString(e.Detail)
	} else {
		b.WriteString(e.Title)
	}
	fmt.Fprintf(&b, " (%s, HTTP %d)", slug, e.Status)
	for _, f := range e.Fields {
		fmt.Fprintf(&b, "\n  %s: %s", f.Field, f.Message)
	}
	return b.String()
}

// eUnexpectedResponse is the slug of an error answer that is not a problem
// body, of a status converge never answers without one.
const eUnexpectedResponse = "unexpected-response"

// foreignSlugs is the slug of an error answer that is not a problem body,
// by its status: the one converge answers that status with, unavailable
// for a gateway that could not reach the API (502, 504); any other status
// is eUnexpectedResponse.
var foreignSlugs = map[int]string{
	http.StatusUnauthorized:                converge.EUNAUTHORIZED,
	http.StatusForbidden:                   converge.EFORBIDDEN,
	http.StatusNotFound:                    converge.ENOTFOUND,
	http.StatusMethodNotAllowed:            "method-not-allowed",
	http.StatusRequestEntityTooLarge:       converge.ETOOLARGE,
	http.StatusUnsupportedMediaType:        converge.EUNSUPPORTEDMEDIA,
	http.StatusTooManyRequests:             "rate-limited",
	http.StatusRequestHeaderFieldsTooLarge: "headers-too-large",
	http.StatusInternalServerError:         converge.EINTERNAL,
	http.StatusBadGateway:                  converge.EUNAVAILABLE,
	http.StatusServiceUnavailable:          converge.EUNAVAILABLE,
	http.StatusGatewayTimeout:              converge.EUNAVAILABLE,
}

// bodyStart is how much of an answer that is not a problem body its
// problem's detail quotes, in bytes.
const bodyStart = 200

// answerProblem returns the problem of resp, a non-2xx answer whose body
// is data, and its problem body on one line (what --json prints). A body
// that is a problem (a JSON object with a type and a status) is that
// problem, as it came; any other body is a problem of the slug of
// foreignSlugs, with the status answered and a detail that quotes the
// start of the body, made printable.
func answerProblem(resp *http.Response, data []byte) (*problemError, []byte) {
	var body struct {
		Type   *string               `json:"type"`
		Title  string                `json:"title"`
		Status *int                  `json:"status"`
		Detail string                `json:"detail"`
		Errors []converge.FieldError `json:"errors"`
	}
	if json.Unmarshal(data, &body) == nil && body.Type != nil && *body.Type != "" && body.Status != nil {
		p := &problemError{Status: resp.StatusCode, Type: *body.Type, Title: body.Title, Detail: body.Detail, Fields: body.Errors}
		if p.Title == "" {
			p.Title = resp.Status
		}
		var line bytes.Buffer
		_ = json.Compact(&line, data)
		return p, line.Bytes()
	}
	slug, ok := foreignSlugs[resp.StatusCode]
	title := "Unexpected response"
	if ok {
		title = api.NewProblem(&converge.AppError{Code: slug}).Title
	} else {
		slug = eUnexpectedResponse
	}
	status := printable(resp.Status, 100)
	if status == "" {
		status = strconv.Itoa(resp.StatusCode)
	}
	detail := "the API answered HTTP " + status
	if start := printable(string(data[:min(len(data), 16*bodyStart)]), bodyStart); start == "" {
		detail += " with no body"
	} else {
		if mt, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type")); err == nil {
			detail += " (" + printable(mt, 100) + ")"
		}
		detail += ", not a problem body: " + start
	}
	p := &problemError{Status: resp.StatusCode, Type: api.ProblemType(slug), Title: title, Detail: detail}
	var line bytes.Buffer
	enc := json.NewEncoder(&line)
	enc.SetEscapeHTML(false) // the detail quotes HTML: <, not \u003c
	_ = enc.Encode(api.Problem{Type: p.Type, Title: p.Title, Status: p.Status, Detail: p.Detail})
	return p, bytes.TrimSuffix(line.Bytes(), []byte("\n"))
}

// printable is s as one line safe for a terminal: invalid UTF-8 replaced,
// every run of white space and control or format characters (escape
// sequences' ESC, bidirectional overrides) one space, trimmed, and cut to
// at most n bytes (then ending in "…").
func printable(s string, n int) string {
	var b strings.Builder
	space := false
	for _, r := range strings.ToValidUTF8(s, "\uFFFD") {
		if unicode.IsSpace(r) || unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			space = true
			continue
		}
		add := utf8.RuneLen(r)
		if space && b.Len() > 0 {
			add++
		}
		if b.Len()+add > n {
			b.WriteString("…")
			break
		}
		if space && b.Len() > 0 {
			b.WriteByte(' ')
		}
		space = false
		b.WriteRune(r)
	}
	return b.String()
}
