package config

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tollgate-dev/tollgate/internal/capture"
)

// TestCapture: the capture block is off by default, decodes strictly, and
// each mistake is reported under its capture.* path.
func TestCapture(t *testing.T) {
	if Default().Capture.Enabled {
		t.Fatal("capture is on by default")
	}
	cfg, err := Parse([]byte(`
capture:
  enabled: true
  slow: 20s
  max_bytes: 4096
  retention: 72h
  redact:
    - preset: cn_id_card
    - preset: cn_mobile
    - name: order
      pattern: 'ORD-\d{8}'
`), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	want := capture.Config{Enabled: true, Slow: 20 * time.Second, MaxBytes: 4096, Retention: 72 * time.Hour,
		Redact: []capture.Rule{{Preset: "cn_id_card"}, {Preset: "cn_mobile"}, {Name: "order", Pattern: `ORD-\d{8}`}}}
	if diff := cmp.Diff(want, cfg.Capture); diff != "" {
		t.Errorf("capture (-want +got):\n%s", diff)
	}
	for _, c := range []struct{ yaml, want string }{
		{"capture:\n  enabled: true\n", "capture.retention: must be positive when capture is enabled: captured text needs an end"},
		{"capture:\n  enabled: true\n  retention: 1h\n  redact:\n    - preset: passport\n",
			`capture.redact[0].preset: unknown preset "passport"; one of cn_id_card, cn_mobile, email`},
		{"capture:\n  enabled: true\n  retention: 1h\n  redact:\n    - name: x\n      pattern: '('\n",
			"capture.redact[0].pattern: error parsing regexp: missing closing ): `(`"},
		{"capture:\n  enabled: true\n  retention: 1h\n  slow: -1s\n", "capture.slow: must not be negative (0: failed requests only)"},
		{"capture:\n  enabeld: true\n", "capture.enabeld: unknown key (line 2)"},
	} {
		_, err := Parse([]byte(c.yaml), noEnv)
		if err == nil || err.Error() != c.want {
			t.Errorf("%q:\n got %v\nwant %s", c.yaml, err, c.want)
		}
	}
}
