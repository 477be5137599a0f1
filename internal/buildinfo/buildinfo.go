// Package buildinfo says which build of tollgate is running, from the
// information the Go toolchain records in every binary
// (runtime/debug.ReadBuildInfo): the module version, the VCS revision and
// its time, and whether the tree had uncommitted changes. It sits at the
// edge of the flow: `tollgate version` prints it, /metrics exports it as
// tollgate_build_info, and the dashboard's footer shows it. Nothing is set
// by -ldflags, so `go install`, `go build` and the container build all
// report the same truth.
package buildinfo

import (
	"fmt"
	"runtime/debug"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// Info is one build's identity. Empty fields were not recorded: a build
// with -buildvcs=false (or outside a repository) has no revision or time.
type Info struct {
	Version   string // module version, e.g. v1.4.0, or "(devel)" for a local build
	Revision  string // VCS revision (full commit hash)
	Time      string // VCS commit time, RFC 3339
	Modified  bool   // the tree had uncommitted changes
	GoVersion string // toolchain, e.g. go1.26.8
}

// Read returns the running binary's build information.
func Read() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return Info{Version: "(devel)"}
	}
	return From(bi)
}

// From extracts Info from build information (Read's source, and tests').
func From(bi *debug.BuildInfo) Info {
	i := Info{Version: bi.Main.Version, GoVersion: bi.GoVersion}
	if i.Version == "" {
		i.Version = "(devel)"
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			i.Revision = s.Value
		case "vcs.time":
			i.Time = s.Value
		case "vcs.modified":
			i.Modified = s.Value == "true"
		}
	}
	return i
}

// Short is the one-word version: the module version when built from a
// tagged module, else dev-<12 hex of the revision>, with "+dirty" for a
// modified tree, else "dev".
func (i Info) Short() string {
	v := i.Version
	if v == "" || v == "(devel)" {
		v = "dev"
		if r := i.Revision; r != "" {
			v += "-" + r[:min(12, len(r))]
		}
	}
	if i.Modified && !strings.Contains(v, "+dirty") {
		v += "+dirty"
	}
	return v
}

// String is what `tollgate version` prints: the short version on the first
// line ("tollgate v1.4.0", as before), then one "key: value" line each.
func (i Info) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "tollgate %s\n", i.Short())
	fmt.Fprintf(&b, "  version:  %s\n", i.Version)
	fmt.Fprintf(&b, "  revision: %s\n", orUnknown(i.Revision))
	fmt.Fprintf(&b, "  time:     %s\n", orUnknown(i.Time))
	fmt.Fprintf(&b, "  modified: %t\n", i.Modified)
	fmt.Fprintf(&b, "  go:       %s\n", i.GoVersion)
	return b.String()
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown (built without VCS information)"
	}
	return s
}

// Metric is tollgate_build_info{version,revision,goversion} = 1, the usual
// info-metric pattern: join it on instance to label other series with the
// build (docs/metrics.md).
func Metric(i Info) prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "tollgate_build_info",
		Help: "The running build: version (module version or dev-<revision>), VCS revision and Go version; always 1.",
		ConstLabels: prometheus.Labels{
			"version":   i.Short(),
			"revision":  i.Revision,
			"goversion": i.GoVersion,
		},
	})
	g.Set(1)
	return g
}
