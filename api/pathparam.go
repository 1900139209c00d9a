package api

import (
	"net/http"
	"net/url"

	"github.com/go-chi/chi/v5"

	"github.com/converge-run/converge"
)

// PathParams decodes the path parameters of the route a request was routed
// to, in its routing context, so that chi.URLParam returns them as the
// client meant them: GET /v1/resources/build/app%2Fweb is the resource
// app/web. chi routes on the escaped path (r.URL.RawPath) when the request
// has one, and its parameters are then still percent-encoded; when it has
// none they are the decoded path already and are left alone (decoding
// twice would turn %2541 into A). A parameter that is not valid
// percent-encoding is answered 404 not-found. It must run after routing:
// as a route's own middleware (chi's With, or Use in a Group), not in a
// router's Use.
func PathParams(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rctx := chi.RouteContext(r.Context())
		if r.URL.RawPath == "" || rctx == nil {
			next.ServeHTTP(w, r)
			return
		}
		for i, v := range rctx.URLParams.Values {
			d, err := url.PathUnescape(v)
			if err != nil {
				writeProblem(w, r, converge.Errorf(converge.ENOTFOUND, "no route for %s %s: %q is not valid percent-encoding", r.Method, truncate(r.URL.Path, 200), truncate(v, 64)))
				return
			}
			rctx.URLParams.Values[i] = d
		}
		next.ServeHTTP(w, r)
	})
}
