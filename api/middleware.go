package api

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/google/uuid"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/telemetry"
)

// MaxRequestIDLen is the longest X-Request-Id a request may bring.
const MaxRequestIDLen = 128

// MaxHeaderBytes is the most request headers (the request line and every
// header line) a request may have: over it the answer is 431
// headers-too-large. The http.Server must allow more than this (cmd sets
// its MaxHeaderBytes to ServerMaxHeaderBytes) so that the check here, with
// its problem body, is the one that answers.
const MaxHeaderBytes = 64 << 10

// ServerMaxHeaderBytes is the http.Server's MaxHeaderBytes: well above
// MaxHeaderBytes, so that LimitHeaders sees the request; net/http answers
// a request far past it by itself, which ProblemListener turns into the
// same problem body.
const ServerMaxHeaderBytes = 1 << 20

// eHeadersTooLarge is the problem slug of 431.
const eHeadersTooLarge = "headers-too-large"

// ValidRequestID reports whether id may be used as a request id: 1 to
// MaxRequestIDLen characters of [A-Za-z0-9._:-].
func ValidRequestID(id string) bool {
	if id == "" || len(id) > MaxRequestIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		switch c := id[i]; {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '_', c == ':', c == '-':
		default:
			return false
		}
	}
	return true
}

// RequestID gives every request an id, in its context (chi's
// middleware.GetReqID reads it) and in the X-Request-Id header of the
// answer: the X-Request-Id the request sent when ValidRequestID accepts
// it, otherwise a new UUID. The dashboard, mounted beside the API, uses it
// too, so that both log and audit the same ids; a request that already has
// an id (RequestID ran further out) keeps it.
func RequestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if middleware.GetReqID(r.Context()) != "" {
			next.ServeHTTP(w, r)
			return
		}
		id := r.Header.Get("X-Request-Id")
		if !ValidRequestID(id) {
			id = newRequestID()
		}
		w.Header().Set("X-Request-Id", id)
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), middleware.RequestIDKey, id)))
	})
}

func newRequestID() string {
	if id, err := uuid.NewV7(); err == nil {
		return id.String()
	}
	return uuid.NewString()
}

// headerBytes is the size of r's request line and header lines as sent.
func headerBytes(r *http.Request) int {
	n := len(r.Method) + 1 + len(r.RequestURI) + 1 + len(r.Proto) + 2
	if r.Host != "" && r.Header.Get("Host") == "" {
		n += len("Host: ") + len(r.Host) + 2
	}
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + 2 + len(v) + 2
		}
	}
	return n
}

// LimitHeaders answers 431 headers-too-large, before any handler, to a
// request whose headers are over MaxHeaderBytes.
func LimitHeaders(next http.Handler) http.Handler { return LimitHeadersCounted(nil)(next) }

// LimitHeadersCounted is LimitHeaders counting the 431 it answers to a
// submission (POST /v1/events or POST /hooks/{source}) in m's
// converge_events_rejected_total, reason headers-too-large, kind unknown
// (the body is not read): a refusal like those countEventRejections and
// countHookRejection count further in (SPEC §14). A nil m counts nothing.
func LimitHeadersCounted(m *telemetry.Metrics) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if headerBytes(r) > MaxHeaderBytes {
				w.Header().Set("Connection", "close")
				writeProblem(w, r, converge.Errorf(eHeadersTooLarge, "the request headers are over the limit of %d bytes", MaxHeaderBytes))
				if r.Method == http.MethodPost && (r.URL.Path == "/v1/events" || strings.HasPrefix(r.URL.Path, "/hooks/")) {
					m.EventRejected(telemetry.UnknownLabel, eHeadersTooLarge)
				}
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// routeMethods are the methods a route may be registered for.
var routeMethods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// routeFinder is what chi's *Mux offers to look a route up.
type routeFinder interface {
	Find(rctx *chi.Context, method, path string) string
}

// routingPath is the path chi routes r on.
func routingPath(r *http.Request) string {
	if r.URL.RawPath != "" {
		return r.URL.RawPath
	}
	return r.URL.Path
}

// allowedMethods returns the patterns, by method, that the router handling
// r (the outermost chi router) routes r's path to; HEAD is there wherever
// GET is (GetHead).
func allowedMethods(r *http.Request) map[string]string {
	out := map[string]string{}
	rctx := chi.RouteContext(r.Context())
	if rctx == nil {
		return out
	}
	f, ok := rctx.Routes.(routeFinder)
	if !ok {
		return out
	}
	return methodsOn(f, routingPath(r))
}

// wildcardEnding is, for a wildcard route whose handler takes only paths
// with a given ending, that ending and the detail of the 404 for any other
// path: POST /v1/quarantine/{kind}/* releases .../{resource}/release and
// takes no other path, so another method on such a path is no route
// either (404), not a method the route does not allow (405).
var wildcardEnding = map[string]struct{ suffix, detail string }{
	"/v1/quarantine/{kind}/*": {"/release", releaseRouteDetail},
}

// pathEnding answers 404 with detail, before any authentication, a
// request to a wildcard route whose path does not end in suffix
// (wildcardEnding), as a path no route takes is answered.
func pathEnding(suffix, detail string) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !strings.HasSuffix(routingPath(r), suffix) {
				writeProblem(w, r, converge.Errorf(converge.ENOTFOUND, "%s", detail))
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// methodsOn returns the patterns, by method, that f routes path to; HEAD
// is there wherever GET is.
func methodsOn(f routeFinder, path string) map[string]string {
	out := map[string]string{}
	for _, m := range routeMethods {
		p := f.Find(chi.NewRouteContext(), m, path)
		if end, ok := wildcardEnding[p]; p == "" || ok && !strings.HasSuffix(path, end.suffix) {
			continue
		}
		out[m] = p
	}
	if p, ok := out[http.MethodGet]; ok {
		out[http.MethodHead] = p
	}
	return out
}

// allowHeader is the Allow header of methods, in routeMethods' order.
func allowHeader(methods map[string]string) string {
	var names []string
	for _, m := range routeMethods {
		if _, ok := methods[m]; ok {
			names = append(names, m)
		}
	}
	return strings.Join(names, ", ")
}

// MethodNotAllowed answers a request whose method its route does not
// allow: a method-not-allowed problem (405) with an Allow header listing
// the methods that route does allow.
func MethodNotAllowed(w http.ResponseWriter, r *http.Request) {
	methods := allowedMethods(r)
	if len(methods) == 0 {
		// Only a wildcard route whose handler would refuse the path
		// matched it (wildcardEnding): no route takes it at all.
		writeProblem(w, r, converge.Errorf(converge.ENOTFOUND, "no route for %s %s", r.Method, truncate(r.URL.Path, 200)))
		return
	}
	w.Header().Set("Allow", allowHeader(staticFirst(methods)))
	writeProblem(w, r, converge.Errorf(eMethodNotAllowed, "%s is not allowed on %s", r.Method, truncate(r.URL.Path, 200)))
}

// MethodNotAllowedOn is MethodNotAllowed for routes, a router mounted in
// another (the dashboard at /ui): its Allow header lists the methods routes
// itself serves for the path left to it (chi's RoutePath), not those of the
// outer router, whose mount takes every method.
func MethodNotAllowedOn(routes chi.Routes) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if allow := AllowOn(routes, r); allow != "" {
			w.Header().Set("Allow", allow)
		}
		writeProblem(w, r, converge.Errorf(eMethodNotAllowed, "%s is not allowed on %s", r.Method, truncate(r.URL.Path, 200)))
	}
}

// AllowOn is the Allow header of a 405 from routes, a router mounted in
// another, for r: the methods routes itself serves for the path left to it
// (chi's RoutePath).
func AllowOn(routes chi.Routes, r *http.Request) string {
	path := routingPath(r)
	if rctx := chi.RouteContext(r.Context()); rctx != nil && rctx.RoutePath != "" {
		path = rctx.RoutePath
	}
	return allowHeader(methodsOn(routes, path))
}

// staticRoutes answers 405 to a request that only a parameter route would
// take for its method when a route without parameters is registered for the
// same path and other methods: GET /v1/dead-letters/redrive is not the dead
// letter whose id is "redrive" but a POST-only route.
func staticRoutes(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		methods := allowedMethods(r)
		if own, ok := methods[r.Method]; ok && isParameterRoute(own) {
			if static := staticFirst(methods); len(static) > 0 && len(static) < len(methods) {
				w.Header().Set("Allow", allowHeader(static))
				writeProblem(w, r, converge.Errorf(eMethodNotAllowed, "%s is not allowed on %s", r.Method, truncate(r.URL.Path, 200)))
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// staticFirst returns the methods, of methods, whose route has no
// parameter when there is any such, or else methods: a path that names a
// route of its own (/v1/dead-letters/redrive) allows that route's
// methods, not those of a parameter route it also matches
// (/v1/dead-letters/{id}), which staticRoutes refuses for it.
func staticFirst(methods map[string]string) map[string]string {
	static := map[string]string{}
	for m, p := range methods {
		if !isParameterRoute(p) {
			static[m] = p
		}
	}
	if len(static) == 0 {
		return methods
	}
	return static
}

// isParameterRoute reports whether the route pattern has a URL parameter
// or a wildcard.
func isParameterRoute(pattern string) bool {
	return strings.ContainsAny(pattern, "{*")
}

// RequestTimeout bounds every request it wraps (request_timeout, SPEC
// §15): the request's context ends after d, so a statement or a lock wait
// still running then is cancelled and the request is answered 503
// unavailable (store.Unavailable) instead of waiting on.
func RequestTimeout(d time.Duration, next http.Handler) http.Handler {
	if d <= 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), d)
		defer cancel()
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}
