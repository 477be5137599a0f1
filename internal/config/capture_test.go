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
api:
  tokens:
    - {name: root, token: tok-admin, role: admin}
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
	admin := "api:\n  tokens:\n    - {name: root, token: tok-admin, role: admin}\n"
	for _, c := range []struct{ yaml, want string }{
		{"capture:\n  enabled: true\n", "capture.retention: must be positive when capture is enabled: captured text needs an end"},
		{"capture:\n  enabled: true\n  retention: 1h\n  redact:\n    - preset: passport\n",
			`capture.redact[0].preset: unknown preset "passport"; one of cn_id_card, cn_mobile, email`},
		{"capture:\n  enabled: true\n  retention: 1h\n  redact:\n    - name: x\n      pattern: '('\n",
			"capture.redact[0].pattern: error parsing regexp: missing closing ): `(`"},
		{"capture:\n  enabled: true\n  retention: 1h\n  slow: -1s\n", "capture.slow: must not be negative (0: failed requests only)"},
		{"capture:\n  enabeld: true\n", "capture.enabeld: unknown key (line 5)"},
		{"capture:\n  max_bytes: 2000000\n", "capture.max_bytes: must be at most 1048576 (1 MiB): the gateway holds 4 × max_bytes of each captured body in memory"},
	} {
		_, err := Parse([]byte(admin+c.yaml), noEnv)
		if err == nil || err.Error() != c.want {
			t.Errorf("%q:\n got %v\nwant %s", c.yaml, err, c.want)
		}
	}
}

// TestCaptureNeedsAdminToken: with no admin API token, anonymous loopback
// clients would be the only readers of captured text, so capture.enabled
// is refused until an admin token is configured; a read token is not
// enough.
func TestCaptureNeedsAdminToken(t *testing.T) {
	const on = "capture:\n  enabled: true\n  retention: 1h\n"
	const want = "capture.enabled: needs an api.tokens entry with role admin: captured text is read with an admin token only, never by an anonymous loopback client"
	for _, y := range []string{on, "api:\n  tokens:\n    - {name: ops, token: tok-read, role: read}\n" + on} {
		if _, err := Parse([]byte(y), noEnv); err == nil || err.Error() != want {
			t.Errorf("%q:\n got %v\nwant %s", y, err, want)
		}
	}
	if _, err := Parse([]byte("api:\n  tokens:\n    - {name: root, token: tok-admin, role: admin}\n"+on), noEnv); err != nil {
		t.Errorf("with an admin token: %v", err)
	}
	if _, err := Parse([]byte("capture:\n  enabled: false\n"), noEnv); err != nil {
		t.Errorf("capture off needs no token: %v", err)
	}
}
