package ui

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5/middleware"
	"github.com/google/uuid"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/api"
)

//go:embed templates/*.html
var templateFS embed.FS

// page is one parsed page: the layout, the partials and the page's own
// template.
type page struct {
	tmpl *template.Template
}

// parsePages parses every page once, at start.
func parsePages() (map[string]*page, error) {
	names, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		return nil, fmt.Errorf("ui: list templates: %w", err)
	}
	var shared []string
	var pages []string
	for _, n := range names {
		base := path.Base(n)
		if base == "layout.html" || strings.HasPrefix(base, "_") {
			shared = append(shared, n)
		} else {
			pages = append(pages, n)
		}
	}
	out := map[string]*page{}
	for _, p := range pages {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, append(append([]string{}, shared...), p)...)
		if err != nil {
			return nil, fmt.Errorf("ui: parse %s: %w", p, err)
		}
		out[strings.TrimSuffix(path.Base(p), ".html")] = &page{tmpl: t}
	}
	return out, nil
}

// traceURL is the link of trace id in the trace viewer: tmpl (ui.trace_url)
// with {trace_id} replaced by id.
func traceURL(tmpl string, id *string) string {
	if id == nil {
		return ""
	}
	return strings.ReplaceAll(tmpl, "{trace_id}", *id)
}

// view is what every page template gets.
type view struct {
	Title     string
	Nav       string
	Actor     *converge.Actor
	Operator  bool
	CSRFToken string
	Flash     *flash
	RiverUI   bool
	RequestID string
	// TraceURL is the configured ui.trace_url: a run's trace id links to
	// it, {trace_id} replaced (traceURL); empty shows the id alone.
	TraceURL string
	Data     any
}

// contentSecurityPolicy allows nothing but this origin's own files.
const contentSecurityPolicy = "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// render executes page name into a buffer, then writes it with status.
func (u *UI) render(w http.ResponseWriter, r *http.Request, status int, name string, v *view) {
	p, ok := u.pages[name]
	if !ok {
		u.serverError(w, r, fmt.Errorf("no page %q", name))
		return
	}
	if a := converge.ActorFrom(r.Context()); a != nil {
		v.Actor = a
		v.Operator = a.Role.Includes(converge.RoleOperator)
	}
	if sess := sessionFrom(r.Context()); sess != nil {
		v.CSRFToken = sess.CSRFToken
	}
	v.RiverUI = u.river != nil && v.Operator
	v.RequestID = middleware.GetReqID(r.Context())
	v.TraceURL = u.cfg.TraceURL
	var buf bytes.Buffer
	if err := p.tmpl.ExecuteTemplate(&buf, "layout.html", v); err != nil {
		u.log.Error("render page", "page", name, "error", err, "request_id", v.RequestID)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Security-Policy", contentSecurityPolicy)
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// errorPage renders a page that explains a refusal or a failure.
func (u *UI) errorPage(w http.ResponseWriter, r *http.Request, status int, title, message string) {
	u.render(w, r, status, "error", &view{Title: title, Data: errorData{Status: status, Message: message}})
}

type errorData struct {
	Status  int
	Message string
}

// serverError logs err with detail and shows "internal error".
func (u *UI) serverError(w http.ResponseWriter, r *http.Request, err error) {
	// A missing table or column is unavailable while the schema is not
	// current (not yet migrated), as the API answers it; a bug otherwise.
	if u.store != nil {
		err = u.store.Unavailable(r.Context(), err)
	}
	if api.ErrorStatus(err) == http.StatusServiceUnavailable {
		// The database is unreachable, read-only or too slow (SPEC §15):
		// no bug, and the same request may work in a moment.
		u.log.Warn("dashboard: database unavailable", "method", r.Method, "path", r.URL.Path, "request_id", middleware.GetReqID(r.Context()), "error", err)
		w.Header().Set("Retry-After", api.RetryAfterUnavailable)
		u.errorPage(w, r, http.StatusServiceUnavailable, "Service unavailable",
			"The database is unavailable right now (restarting, read-only or too slow). Nothing was changed; try again in a moment.")
		return
	}
	u.log.Error("dashboard error", "method", r.Method, "path", r.URL.Path, "request_id", middleware.GetReqID(r.Context()), "error", err)
	u.errorPage(w, r, http.StatusInternalServerError, "Internal error", "Something went wrong on the server. The request id below is in its log.")
}

// appError shows an application error as a page with the status the API
// gives it (api.ErrorStatus), or a server error for anything that maps to
// 5xx.
func (u *UI) appError(w http.ResponseWriter, r *http.Request, err error) {
	status := api.ErrorStatus(err)
	if status >= http.StatusInternalServerError {
		u.serverError(w, r, err)
		return
	}
	u.errorPage(w, r, status, http.StatusText(status), appMessage(err))
}

// appMessage is the human message of an application error.
func appMessage(err error) string {
	var ae *converge.AppError
	if errors.As(err, &ae) {
		return ae.Message
	}
	return "internal error"
}

func (u *UI) handleNotFound(w http.ResponseWriter, r *http.Request) {
	u.errorPage(w, r, http.StatusNotFound, "Not found", "There is no page at "+r.URL.Path+".")
}

// funcs are the template helpers.
var funcs = template.FuncMap{
	"ts":         formatTime,
	"tsp":        formatTimePtr,
	"iso":        func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
	"ago":        ago,
	"durationMS": durationMS,
	"prettyJSON": prettyJSON,
	"streamURL":  streamURL,
	"shortID":    func(id fmt.Stringer) string { s := id.String(); return s[len(s)-12:] },
	"truncate":   truncate,
	"add":        func(a, b int) int { return a + b },
	"traceURL":   traceURL,
	"hasHold":    func(hold []string, h string) bool { return slices.Contains(hold, h) },
	"deref":      func(p *int64) int64 { return *p },
	"derefInt":   func(p *int) int { return *p },
	"itoa":       strconv.Itoa,
	"div2":       func(n int) int { return n / 2 },
	"skipReason": skipReason,
	"decision":   decision,
	"releaseOf": func(kind, resource, csrf, back string) heldForm {
		return heldForm{Kind: kind, Resource: resource, CSRF: csrf, Back: back}
	},
}

// decision is the heldForm of run id (a uuid.UUID or a *uuid.UUID).
func decision(id any, csrf, back string) heldForm {
	f := heldForm{CSRF: csrf, Back: back}
	switch v := id.(type) {
	case uuid.UUID:
		f.ID = v
	case *uuid.UUID:
		f.ID = *v
	}
	return f
}

// heldForm is what the held-work forms of _held.html need: the run (decide)
// or the stream (release), the session's form token and the page to return
// to.
type heldForm struct {
	ID                         uuid.UUID
	Kind, Resource, CSRF, Back string
}

func formatTime(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format("2006-01-02 15:04:05 UTC")
}

func formatTimePtr(t *time.Time) string {
	if t == nil {
		return "—"
	}
	return formatTime(*t)
}

// ago says how long before now t was, coarsely.
func ago(t time.Time) string {
	d := time.Since(t)
	switch {
	case d < 0:
		return "just now"
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	}
	return fmt.Sprintf("%dd ago", int(d.Hours()/24))
}

// durationMS formats a duration in milliseconds.
func durationMS(ms *int64) string {
	if ms == nil {
		return "—"
	}
	switch d := *ms; {
	case d < 1000:
		return fmt.Sprintf("%d ms", d)
	case d < 60_000:
		return fmt.Sprintf("%.1f s", float64(d)/1000)
	default:
		return (time.Duration(d) * time.Millisecond).Round(time.Second).String()
	}
}

// prettyJSON indents a JSON document; anything else is shown as it is.
func prettyJSON(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "null"
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		return string(raw)
	}
	return buf.String()
}

// streamURL is the dashboard page of a stream. Resource keys hold only
// characters that are safe in a path.
func streamURL(kind, resource string) string {
	return "/ui/streams/" + url.PathEscape(kind) + "/" + resource
}

// truncate cuts s to n runes, with an ellipsis.
func truncate(n int, s string) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}

// skipReason explains why a bulk action left a dead letter alone.
func skipReason(code string) string {
	switch code {
	case converge.SkipNotFound:
		return "not found (purged?)"
	case converge.SkipNotOpen:
		return "no longer open: redriven, discarded or superseded meanwhile"
	case converge.SkipSuperseded:
		return "a newer version of its stream was accepted since; a redrive would go backwards"
	case converge.ECONFLICT:
		return "its stream has an unfinished run"
	}
	return code
}
