// Command vulncheck turns the OSV entries of the golang.org/x/vulndb module
// (data/osv/GO-*.json) into a vulnerability database in the layout
// govulncheck reads with -db file:///dir (the v1 API of
// https://go.dev/security/vuln/database):
//
//	index/db.json        {"modified": the x/vulndb commit's time}
//	index/modules.json   [{path, vulns: [{id, modified, fixed}]}], sorted
//	ID/GO-YYYY-NNNN.json the entries, unchanged
//
// So CI can run govulncheck without vuln.go.dev: the Go module proxy
// serves the data as a module. The index is computed the way x/vuln's own
// client indexes a directory of entries (internal/client/index.go), so
// govulncheck sees what it would see from vuln.go.dev at that commit.
//
//	go run . -osv $(go mod download -json golang.org/x/vulndb@V | jq -r .Dir)/data/osv \
//		-out DIR -modified 2026-11-05T23:49:57Z
//
// Entries whose modified time is zero (the repository leaves it to the
// deployment, which takes it from git history) get their published time,
// or else the commit's.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/semver"
)

// entry is the part of an OSV entry the index needs.
type entry struct {
	ID        string    `json:"id"`
	Modified  time.Time `json:"modified"`
	Published time.Time `json:"published"`
	Affected  []struct {
		Module struct {
			Path string `json:"name"`
		} `json:"package"`
		Ranges []struct {
			Type   string `json:"type"`
			Events []struct {
				Introduced string `json:"introduced,omitempty"`
				Fixed      string `json:"fixed,omitempty"`
			} `json:"events"`
		} `json:"ranges"`
	} `json:"affected"`
}

type moduleVuln struct {
	ID       string    `json:"id"`
	Modified time.Time `json:"modified"`
	Fixed    string    `json:"fixed,omitempty"`
}

type moduleMeta struct {
	Path  string       `json:"path"`
	Vulns []moduleVuln `json:"vulns"`
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "gate" {
		os.Exit(gateMain(os.Args[2:]))
	}
	osvDir := flag.String("osv", "", "directory of OSV entries (x/vulndb's data/osv)")
	out := flag.String("out", "", "database directory to write (replaced)")
	modified := flag.String("modified", "", "the data's commit time (RFC 3339): the x/vulndb pseudo-version's timestamp")
	flag.Parse()
	t, err := time.Parse(time.RFC3339, *modified)
	if *osvDir == "" || *out == "" || err != nil {
		fmt.Fprintln(os.Stderr, "usage: vulncheck -osv DIR -out DIR -modified RFC3339")
		os.Exit(2)
	}
	n, err := build(*osvDir, *out, t)
	if err != nil {
		fmt.Fprintln(os.Stderr, "vulncheck:", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "vulncheck: %d entries written to %s\n", n, *out)
}

// build writes the database into a temporary directory beside out and
// renames it into place, so a run cut short never leaves half a database
// that a later run would take as current.
func build(osvDir, out string, dataTime time.Time) (int, error) {
	names, err := filepath.Glob(filepath.Join(osvDir, "GO-*.json"))
	if err != nil {
		return 0, err
	}
	if len(names) == 0 {
		return 0, fmt.Errorf("no GO-*.json entries in %s", osvDir)
	}
	tmp := out + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return 0, err
	}
	for _, d := range []string{"index", "ID"} {
		if err := os.MkdirAll(filepath.Join(tmp, d), 0o755); err != nil {
			return 0, err
		}
	}
	modules := map[string]*moduleMeta{}
	for _, name := range names {
		b, err := os.ReadFile(name)
		if err != nil {
			return 0, err
		}
		var e entry
		if err := json.Unmarshal(b, &e); err != nil {
			return 0, fmt.Errorf("%s: %w", name, err)
		}
		if filepath.Base(name) != e.ID+".json" {
			return 0, fmt.Errorf("%s holds entry %q: the file must be named after its id", name, e.ID)
		}
		if e.Modified.IsZero() {
			// The repository's files leave it zero (and often the
			// publication time too): vuln.go.dev's deployment sets them
			// from git history, which a module zip does not carry.
			e.Modified = e.Published
			if e.Modified.IsZero() {
				e.Modified = dataTime
			}
		}
		for _, a := range e.Affected {
			m := modules[a.Module.Path]
			if m == nil {
				m = &moduleMeta{Path: a.Module.Path, Vulns: []moduleVuln{}}
				modules[a.Module.Path] = m
			}
			m.Vulns = append(m.Vulns, moduleVuln{ID: e.ID, Modified: e.Modified, Fixed: latestFix(a.Ranges)})
		}
		if err := os.WriteFile(filepath.Join(tmp, "ID", e.ID+".json"), b, 0o644); err != nil {
			return 0, err
		}
	}
	list := make([]*moduleMeta, 0, len(modules))
	for _, m := range modules {
		slices.SortStableFunc(m.Vulns, func(a, b moduleVuln) int { return strings.Compare(a.ID, b.ID) })
		list = append(list, m)
	}
	slices.SortFunc(list, func(a, b *moduleMeta) int { return strings.Compare(a.Path, b.Path) })
	if err := writeJSON(filepath.Join(tmp, "index", "modules.json"), list); err != nil {
		return 0, err
	}
	if err := writeJSON(filepath.Join(tmp, "index", "db.json"), struct {
		Modified time.Time `json:"modified"`
	}{dataTime}); err != nil {
		return 0, err
	}
	if err := os.RemoveAll(out); err != nil && !errors.Is(err, os.ErrNotExist) {
		return 0, err
	}
	return len(names), os.Rename(tmp, out)
}

// latestFix is x/vuln's semver.NonSupersededFix: the latest fixed version
// of the SEMVER ranges, or "" when the module was vulnerable again after it.
// Versions in OSV have no "v" (the standard library's may read "go1.x").
func latestFix(ranges []struct {
	Type   string `json:"type"`
	Events []struct {
		Introduced string `json:"introduced,omitempty"`
		Fixed      string `json:"fixed,omitempty"`
	} `json:"events"`
}) string {
	canon := func(v string) string { return "v" + strings.TrimPrefix(strings.TrimPrefix(v, "v"), "go") }
	less := func(a, b string) bool { return semver.Compare(canon(a), canon(b)) < 0 }
	var latest string
	for _, r := range ranges {
		if r.Type != "SEMVER" {
			continue
		}
		for _, e := range r.Events {
			if e.Fixed != "" && less(latest, e.Fixed) {
				latest = e.Fixed
			}
		}
		for _, e := range r.Events {
			if e.Introduced != "" && e.Introduced != "0" && less(latest, e.Introduced) {
				latest = ""
				break
			}
		}
	}
	return latest
}

func writeJSON(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}
