package buildinfo

import (
	"runtime/debug"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestFrom(t *testing.T) {
	const rev = "75b90512c0ffee0123456789abcdef0123456789"
	for _, tc := range []struct {
		name  string
		bi    debug.BuildInfo
		want  Info
		short string
	}{
		{
			name:  "tagged module",
			bi:    debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.4.0"}},
			want:  Info{Version: "v1.4.0", GoVersion: "go1.26.8"},
			short: "v1.4.0",
		},
		{
			name: "local build with VCS",
			bi: debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
				{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev},
				{Key: "vcs.time", Value: "2026-12-01T10:00:00Z"}, {Key: "vcs.modified", Value: "false"},
			}},
			want:  Info{Version: "(devel)", Revision: rev, Time: "2026-12-01T10:00:00Z", GoVersion: "go1.26.8"},
			short: "dev-75b90512c0ff",
		},
		{
			name: "modified tree",
			bi: debug.BuildInfo{Main: debug.Module{Version: "v1.4.1-0.20261201100000-75b90512c0ff+dirty"}, Settings: []debug.BuildSetting{
				{Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: "true"},
			}},
			want:  Info{Version: "v1.4.1-0.20261201100000-75b90512c0ff+dirty", Revision: rev, Modified: true},
			short: "v1.4.1-0.20261201100000-75b90512c0ff+dirty",
		},
		{
			name:  "no VCS information (-buildvcs=false)",
			bi:    debug.BuildInfo{GoVersion: "go1.26.8"},
			want:  Info{Version: "(devel)", GoVersion: "go1.26.8"},
			short: "dev",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := From(&tc.bi)
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("From (-want +got):\n%s", d)
			}
			if s := got.Short(); s != tc.short {
				t.Errorf("Short = %q; want %q", s, tc.short)
			}
			if first, _, _ := strings.Cut(got.String(), "\n"); first != "tollgate "+tc.short {
				t.Errorf("String's first line %q; want %q", first, "tollgate "+tc.short)
			}
		})
	}
}

func TestMetric(t *testing.T) {
	reg := prometheus.NewRegistry()
	i := Info{Version: "v1.4.0", Revision: "abc", GoVersion: "go1.26.8"}
	reg.MustRegister(Metric(i))
	want := `# HELP tollgate_build_info The running build: version (module version or dev-<revision>), VCS revision and Go version; always 1.
# TYPE tollgate_build_info gauge
tollgate_build_info{goversion="go1.26.8",revision="abc",version="v1.4.0"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "tollgate_build_info"); err != nil {
		t.Error(err)
	}
}
