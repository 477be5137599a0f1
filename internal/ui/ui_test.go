package ui

import (
	"encoding/json"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"
)

var langs = []string{"en", "zh"}

func catalogue(t *testing.T, lang string) map[string]string {
	t.Helper()
	b, err := fs.ReadFile(Static(), "i18n/"+lang+".json")
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]string
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("i18n/%s.json: %v", lang, err)
	}
	return m
}

// usedKeys are the message keys the page can show: t('…') in the script,
// data-i18n="…" in the HTML. Keys are always literals (see app.js).
func usedKeys(t *testing.T) map[string]bool {
	t.Helper()
	used := map[string]bool{}
	js, err := fs.ReadFile(Static(), "app.js")
	if err != nil {
		t.Fatal(err)
	}
	html, err := fs.ReadFile(Static(), "index.html")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`\bt\('([^']*)'`).FindAllStringSubmatch(string(js), -1) {
		used[m[1]] = true
	}
	for _, m := range regexp.MustCompile(`data-i18n="([^"]*)"`).FindAllStringSubmatch(string(html), -1) {
		used[m[1]] = true
	}
	// A key built at run time (t(x), t('a.' + b)) could render untranslated.
	// Two exceptions: t's own definition, and the data-i18n keys of the
	// HTML, which are checked above.
	code := strings.NewReplacer("function t(key", "", "t(el.getAttribute('data-i18n'))", "").Replace(string(js))
	if m := regexp.MustCompile(`\bt\((?:[^')]|'[^']*'\s*\+)`).FindString(code); m != "" {
		t.Errorf("app.js computes a message key (%s); write each key as a literal", m)
	}
	if len(used) < 50 {
		t.Fatalf("found only %d message keys in app.js and index.html; the pattern is broken", len(used))
	}
	return used
}

// TestCataloguesMatch: both languages have exactly the same keys, none
// empty, the same {placeholders} per key, and every key the page uses
// exists (so no untranslated key can render) and every key is used.
func TestCataloguesMatch(t *testing.T) {
	en, zh := catalogue(t, "en"), catalogue(t, "zh")
	for k := range en {
		if _, ok := zh[k]; !ok {
			t.Errorf("key %q is in en.json, not in zh.json", k)
		}
	}
	for k := range zh {
		if _, ok := en[k]; !ok {
			t.Errorf("key %q is in zh.json, not in en.json", k)
		}
	}
	ph := regexp.MustCompile(`\{\w+\}`)
	for k, v := range en {
		if strings.TrimSpace(v) == "" || strings.TrimSpace(zh[k]) == "" {
			t.Errorf("key %q has an empty message", k)
		}
		a, b := ph.FindAllString(v, -1), ph.FindAllString(zh[k], -1)
		slices.Sort(a)
		slices.Sort(b)
		if !slices.Equal(a, b) {
			t.Errorf("key %q: placeholders %v in English, %v in Chinese", k, a, b)
		}
	}
	used := usedKeys(t)
	for k := range used {
		for _, l := range langs {
			if _, ok := catalogue(t, l)[k]; !ok {
				t.Errorf("key %q is used by the page but missing from %s.json", k, l)
			}
		}
	}
	for k := range en {
		if !used[k] {
			t.Errorf("key %q is in the catalogues but never used", k)
		}
	}
}

// TestOffline: the page loads nothing from another origin.
func TestOffline(t *testing.T) {
	ext := regexp.MustCompile(`(?i)(src|href)\s*=\s*["']?(https?:)?//`)
	for _, name := range []string{"index.html", "app.js", "app.css"} {
		b, err := fs.ReadFile(Static(), name)
		if err != nil {
			t.Fatal(err)
		}
		if m := ext.FindString(string(b)); m != "" {
			t.Errorf("%s refers to another origin: %s", name, m)
		}
		if strings.Contains(string(b), "@import") || strings.Contains(string(b), "url(http") {
			t.Errorf("%s imports from elsewhere", name)
		}
	}
	for _, name := range []string{"vendor/uplot/uPlot.iife.min.js", "vendor/uplot/uPlot.min.css", "vendor/uplot/LICENSE"} {
		if _, err := fs.Stat(Static(), name); err != nil {
			t.Errorf("vendored file missing (run scripts/vendor-ui.sh): %v", err)
		}
	}
}

func TestHandler(t *testing.T) {
	srv := httptest.NewServer(Handler("/ui/", "v1.4.0<x>"))
	defer srv.Close()
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	cases := []struct {
		method, path string
		status       int
		ctype        string
	}{
		{"GET", "/ui/", 200, "text/html"},
		{"GET", "/ui/app.js", 200, "text/javascript"},
		{"GET", "/ui/app.css", 200, "text/css"},
		{"GET", "/ui/i18n/zh.json", 200, "application/json"},
		{"GET", "/ui/vendor/uplot/uPlot.iife.min.js", 200, "text/javascript"},
		{"GET", "/ui", 301, ""},
		{"GET", "/ui/nope.js", 404, ""},
		{"POST", "/ui/", 405, ""},
	}
	for _, c := range cases {
		req, _ := http.NewRequest(c.method, srv.URL+c.path, nil)
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.status {
			t.Errorf("%s %s: %d, want %d", c.method, c.path, resp.StatusCode, c.status)
		}
		if c.ctype != "" && !strings.HasPrefix(resp.Header.Get("Content-Type"), c.ctype) {
			t.Errorf("%s %s: Content-Type %q, want %s", c.method, c.path, resp.Header.Get("Content-Type"), c.ctype)
		}
		if c.status == 200 && !strings.Contains(resp.Header.Get("Content-Security-Policy"), "default-src 'none'") {
			t.Errorf("%s %s: no CSP", c.method, c.path)
		}
	}
}

// TestFooterVersion: the page names the build that served it, escaped.
func TestFooterVersion(t *testing.T) {
	srv := httptest.NewServer(Handler("/ui/", "dev-75b90512c0ff<x>"))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/ui/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := `<span id="version">dev-75b90512c0ff&lt;x&gt;</span>`; !strings.Contains(string(b), want) {
		t.Errorf("GET /ui/ has no %s in its footer:\n%s", want, b)
	}
	if strings.Contains(string(b), versionMark) {
		t.Errorf("GET /ui/ still has the mark %s", versionMark)
	}
}
