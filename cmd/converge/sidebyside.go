package main

import (
	"net/http"
	"strings"
)

// sideBySide serves the dashboard under /ui and the API everywhere else.
// The API is called as the top handler of its request, not mounted in a
// router of ours: its middleware (HEAD for every GET, the Allow header of
// a 405, the 405 of a static route) asks the router in the request's
// routing context which routes exist, and a mounting router would answer
// for itself.
func sideBySide(apiHandler, dashboard http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ui" || strings.HasPrefix(r.URL.Path, "/ui/") {
			dashboard.ServeHTTP(w, r)
			return
		}
		apiHandler.ServeHTTP(w, r)
	})
}
