package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestBuild: entries become the v1 layout, the index carries each
// module's non-superseded fix (none when the module was vulnerable again
// after it), and a zero modified time falls back to published, then to
// the data's time.
func TestBuild(t *testing.T) {
	osv := t.TempDir()
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(osv, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("GO-2026-0001.json", `{"id":"GO-2026-0001","modified":"0001-01-01T00:00:00Z","published":"2026-01-02T00:00:00Z",
		"affected":[{"package":{"name":"example.com/a"},"ranges":[{"type":"SEMVER","events":[{"introduced":"0"},{"fixed":"1.2.0"},{"introduced":"1.3.0"},{"fixed":"1.3.4"}]}]},
		{"package":{"name":"stdlib"},"ranges":[{"type":"SEMVER","events":[{"introduced":"0"},{"fixed":"1.26.9"},{"introduced":"1.27.0-0"},{"fixed":"1.27.2"}]}]}]}`)
	write("GO-2026-0002.json", `{"id":"GO-2026-0002","modified":"0001-01-01T00:00:00Z","published":"0001-01-01T00:00:00Z",
		"affected":[{"package":{"name":"example.com/a"},"ranges":[{"type":"SEMVER","events":[{"introduced":"0"},{"fixed":"1.0.0"},{"introduced":"2.0.0"}]}]}]}`)
	out := filepath.Join(t.TempDir(), "db")
	data := time.Date(2026, 11, 5, 23, 49, 57, 0, time.UTC)
	n, err := build(osv, out, data)
	if err != nil || n != 2 {
		t.Fatalf("build: %d entries, %v", n, err)
	}
	b, err := os.ReadFile(filepath.Join(out, "index", "modules.json"))
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"path":"example.com/a","vulns":[{"id":"GO-2026-0001","modified":"2026-01-02T00:00:00Z","fixed":"1.3.4"},` +
		`{"id":"GO-2026-0002","modified":"2026-11-05T23:49:57Z"}]},` +
		`{"path":"stdlib","vulns":[{"id":"GO-2026-0001","modified":"2026-01-02T00:00:00Z","fixed":"1.27.2"}]}]`
	if string(b) != want {
		t.Errorf("modules.json:\n%s\nwant\n%s", b, want)
	}
	if b, _ := os.ReadFile(filepath.Join(out, "index", "db.json")); string(b) != `{"modified":"2026-11-05T23:49:57Z"}` {
		t.Errorf("db.json: %s", b)
	}
	var e struct{ ID string }
	if b, err := os.ReadFile(filepath.Join(out, "ID", "GO-2026-0002.json")); err != nil || json.Unmarshal(b, &e) != nil || e.ID != "GO-2026-0002" {
		t.Errorf("ID/GO-2026-0002.json: %s, %v", b, err)
	}

	write("GO-2026-0003.json", `{"id":"GO-2026-9999"}`)
	if _, err := build(osv, out, data); err == nil || !strings.Contains(err.Error(), "named after its id") {
		t.Errorf("an entry in a file of another name: %v, want an error", err)
	}
}

// TestCalledFindings: only findings whose trace reaches a function count,
// once per vulnerability and module; output without a config message is
// an error (the scan did not run).
func TestCalledFindings(t *testing.T) {
	in := `{"config":{"scanner_version":"v1.9.0"}}
{"finding":{"osv":"GO-1","fixed_version":"v0.62.0","trace":[{"module":"golang.org/x/net","version":"v0.60.0"}]}}
{"finding":{"osv":"GO-2","fixed_version":"v1.26.9","trace":[{"module":"stdlib","version":"v1.26.8","package":"net/http","function":"Serve"},{"module":"m","package":"m/a","function":"Main"}]}}
{"finding":{"osv":"GO-2","fixed_version":"v1.26.9","trace":[{"module":"stdlib","version":"v1.26.8","package":"net/http","function":"Get"},{"module":"m","package":"m/b","function":"F"}]}}
`
	got, err := calledFindings(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].id != "GO-2" || got[0].module != "stdlib" || got[0].caller != "m/a.Main" {
		t.Errorf("called = %+v; want GO-2 in stdlib once, called from m/a.Main", got)
	}
	if _, err := calledFindings(strings.NewReader(`{"finding":{"osv":"GO-1"}}`)); err == nil {
		t.Error("output without a config message accepted")
	}
}
