// Package ui is tollgate's dashboard: static HTML, CSS and JavaScript
// embedded in the binary and served at /ui/ beside the JSON API it reads
// (/api/v1/). Nothing is fetched from elsewhere: no CDN, no web font, no
// build step; the one library (uPlot, for the token timeline) is vendored
// under static/vendor/ by scripts/vendor-ui.sh. Every word shown comes from
// the message catalogues static/i18n/en.json and static/i18n/zh.json.
package ui

import (
	"bytes"
	"embed"
	"html"
	"io/fs"
	"net/http"
	"strings"
	"time"
)

//go:embed static
var files embed.FS

// Static is the dashboard's files, rooted at static/.
func Static() fs.FS {
	sub, err := fs.Sub(files, "static")
	if err != nil {
		panic(err) // the embed pattern above guarantees the directory
	}
	return sub
}

// csp keeps the page to its own origin: scripts, styles, data and images
// come from tollgate itself (uPlot sets inline styles on its elements).
const csp = "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// versionMark in index.html is replaced by the running build's version
// (the footer), so the page says which tollgate served it without an API
// call or a script.
const versionMark = "{{version}}"

// Handler serves the dashboard under prefix (e.g. "/ui/"); the bare prefix
// without its slash redirects to it. version is shown in the footer.
func Handler(prefix, version string) http.Handler {
	fsrv := http.StripPrefix(prefix, http.FileServerFS(Static()))
	page, err := fs.ReadFile(Static(), "index.html")
	if err != nil {
		panic(err) // embedded
	}
	page = bytes.ReplaceAll(page, []byte(versionMark), []byte(html.EscapeString(version)))
	started := time.Now()
	bare := strings.TrimSuffix(prefix, "/")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		if r.URL.Path == bare {
			http.Redirect(w, r, prefix, http.StatusMovedPermanently)
			return
		}
		h := w.Header()
		h.Set("Content-Security-Policy", csp)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		if r.URL.Path == prefix {
			h.Set("Content-Type", "text/html; charset=utf-8")
			http.ServeContent(w, r, "index.html", started, bytes.NewReader(page))
			return
		}
		fsrv.ServeHTTP(w, r)
	})
}
