package config

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/testcert"
)

// writeCert writes a fresh self-signed certificate for 127.0.0.1 and its
// key as PEM files into dir, named prefix+"cert.pem" and prefix+"key.pem".
func writeCert(t *testing.T, dir, prefix string) (certFile, keyFile string) {
	certFile, keyFile, _ = testcert.Write(t, dir, prefix)
	return certFile, keyFile
}

func TestListenTLS(t *testing.T) {
	dir := t.TempDir()
	cert, key := writeCert(t, dir, "")
	_, otherKey := writeCert(t, dir, "other-")
	missing := filepath.Join(dir, "missing.pem")

	cfg, err := Parse(fmt.Appendf(nil, "listen_tls: {cert_file: %q, key_file: %q}\n", cert, key), noEnv)
	if err != nil {
		t.Fatalf("good pair refused: %v", err)
	}
	tc, err := cfg.ListenTLS.Load("listen_tls")
	if err != nil || len(tc.Certificates) != 1 || tc.MinVersion != tls.VersionTLS12 {
		t.Fatalf("Load: %v %+v", err, tc)
	}
	if (ListenTLS{}).Enabled() || !cfg.ListenTLS.Enabled() {
		t.Error("Enabled: want false for the zero value, true when files are named")
	}

	for _, c := range []struct{ name, cert, key, want string }{
		{"no key", cert, "", "listen_tls.key_file: required with listen_tls.cert_file"},
		{"no cert", "", key, "listen_tls.cert_file: required with listen_tls.key_file"},
		{"cert missing", missing, key, "listen_tls.cert_file: stat " + missing + ": no such file or directory"},
		{"key missing", cert, missing, "listen_tls.key_file: stat " + missing + ": no such file or directory"},
		{"cert a directory", dir, key, "listen_tls.cert_file: " + dir + ": not a regular file"},
		// A device would block or never end: refused before reading.
		{"key a device", cert, os.DevNull, "listen_tls.key_file: " + os.DevNull + ": not a regular file"},
		{"key as cert", key, key, "listen_tls.cert_file: no PEM CERTIFICATE block in " + key},
		{"key of another cert", cert, otherKey, "listen_tls.key_file: " + otherKey + ": tls: private key does not match public key"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse(fmt.Appendf(nil, "listen_tls: {cert_file: %q, key_file: %q}\n", c.cert, c.key), noEnv)
			if err == nil || err.Error() != c.want {
				t.Errorf("error:\n got %v\nwant %s", err, c.want)
			}
		})
	}
}

// TestSecretsOnlyAsHashes: after loading, neither a proxy key nor an API
// token given in plain text is left anywhere in the Config, and a digest
// given in upper case still identifies its key or token.
func TestSecretsOnlyAsHashes(t *testing.T) {
	const proxyKey, apiToken = "sk-plain-proxy-key-8c1f", "tok-plain-api-token-51d2"
	yml := fmt.Sprintf(`auth:
  keys:
    - {name: a, key: %s, user_id: alice}
    - {name: b, key_sha256: %s, user_id: bob}
api:
  tokens:
    - {name: ops, token: %s, role: admin}
    - {name: dash, token_sha256: %s, role: read}
`, proxyKey, strings.ToUpper(HashKey("sk-bob")), apiToken, strings.ToUpper(HashKey("tok-dash")))
	cfg, err := Parse([]byte(yml), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if dump := fmt.Sprintf("%+v", cfg); strings.Contains(dump, proxyKey) || strings.Contains(dump, apiToken) {
		t.Errorf("a plaintext secret survived loading:\n%s", dump)
	}
	if got := cfg.Auth.Keys[0].Hash(); got != HashKey(proxyKey) {
		t.Errorf("key a kept as %q, want the sha256 of the key", got)
	}
	if got := cfg.Auth.Keys[1].Hash(); got != HashKey("sk-bob") {
		t.Errorf("upper-case key_sha256 read as %q, want %q", got, HashKey("sk-bob"))
	}
	if got := cfg.API.Tokens[0].Hash(); got != HashKey(apiToken) {
		t.Errorf("token ops kept as %q, want the sha256 of the token", got)
	}
	if got := cfg.API.Tokens[1].Hash(); got != HashKey("tok-dash") {
		t.Errorf("upper-case token_sha256 read as %q, want %q", got, HashKey("tok-dash"))
	}
}

// TestLogValueRedacts: a Config logged whole (as a careless debug line
// would) shows none of the plain-text secrets a file may hold, in either
// log format, and logging leaves the Config itself intact.
func TestLogValueRedacts(t *testing.T) {
	yml := `upstreams:
  - {name: hosted, url: "https://api.example.com/v1", engine: openai, api_key: sk-up-SECRET-1}
trace_export: {endpoint: "http://127.0.0.1:4318", headers: {Authorization: "Bearer SECRET-2"}}
notifiers:
  - {name: ding, type: dingtalk, url: "https://oapi.dingtalk.com/robot/send?access_token=SECRET-3", secret: SECRET-4}
  - {name: hook, type: webhook, url: "https://hooks.example.com/SECRET-5", headers: {X-Token: SECRET-6}}
quotas:
  redis: {url: "redis://:SECRET-7@127.0.0.1:6379/0"}
`
	cfg, err := Parse([]byte(yml), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	var buf strings.Builder
	for _, h := range []slog.Handler{slog.NewJSONHandler(&buf, nil), slog.NewTextHandler(&buf, nil)} {
		slog.New(h).Info("config", "by_pointer", cfg, "by_value", *cfg)
	}
	out := buf.String()
	if strings.Contains(out, "SECRET") {
		t.Errorf("a secret was logged:\n%s", out)
	}
	for _, want := range []string{"hosted", "https://oapi.dingtalk.com/[redacted]", "redis://127.0.0.1:6379/[redacted]"} {
		if !strings.Contains(out, want) {
			t.Errorf("the log lacks %q (redaction went too far):\n%s", want, out)
		}
	}
	if cfg.Upstreams[0].APIKey != "sk-up-SECRET-1" || cfg.Notifiers[0].Secret != "SECRET-4" || cfg.Notifiers[1].Headers["X-Token"] != "SECRET-6" ||
		cfg.TraceExport.Headers["Authorization"] != "Bearer SECRET-2" || cfg.Quotas.Redis.URL != "redis://:SECRET-7@127.0.0.1:6379/0" {
		t.Errorf("logging changed the config itself: %+v", cfg)
	}
}

// TestAPITokenErrors: API tokens need a role of the two there are and
// exactly one of token / token_sha256, each error naming the field.
func TestAPITokenErrors(t *testing.T) {
	for _, c := range []struct{ token, want string }{
		{"{token: t, role: root}", `api.tokens[0].role: must be admin or read; got "root"`},
		{"{token: t}", `api.tokens[0].role: must be admin or read; got ""`},
		{"{role: read}", "api.tokens[0]: needs token or token_sha256"},
		{"{token: t, token_sha256: " + HashKey("t") + ", role: read}", "api.tokens[0]: give token or token_sha256, not both"},
		{"{token_sha256: abc, role: read}", "api.tokens[0].token_sha256: must be 64 hex characters"},
	} {
		_, err := Parse([]byte("api:\n  tokens:\n    - "+c.token+"\n"), noEnv)
		if err == nil || err.Error() != c.want {
			t.Errorf("%s:\n got %v\nwant %s", c.token, err, c.want)
		}
	}
}
