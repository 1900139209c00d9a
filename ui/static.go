package ui

import (
	"embed"
	"io/fs"
	"net/http"
	"strings"
)

//go:embed static
var staticFS embed.FS

var staticFiles = func() http.Handler {
	sub, err := fs.Sub(staticFS, "static")
	if err != nil {
		panic(err)
	}
	return http.StripPrefix("/ui/static/", http.FileServerFS(sub))
}()

// handleStatic serves the style sheet and the small script.
func (u *UI) handleStatic(w http.ResponseWriter, r *http.Request) {
	if strings.HasSuffix(r.URL.Path, "/") {
		u.handleNotFound(w, r)
		return
	}
	w.Header().Set("Cache-Control", "public, max-age=3600")
	staticFiles.ServeHTTP(w, r)
}
