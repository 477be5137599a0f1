package main

// Tests behind docs/security.md that need the whole serve wiring: TLS on
// the listener, secrets kept out of logs and the ledger, header limits,
// API tokens versus proxy keys.

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/sim"
	"github.com/tollgate-dev/tollgate/internal/testcert"
)

// selfSigned writes a certificate for 127.0.0.1 and its key as PEM files in
// dir and returns their paths and a pool trusting the certificate.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	return testcert.Write(t, dir, "")
}

// quietConfig is a serve config on loopback with no side listeners.
func quietConfig(t *testing.T, upstream string) *config.Config {
	cfg := shutdownConfig(t, upstream, 5*time.Second)
	cfg.OTLP.HTTPListen, cfg.OTLP.GRPCListen = "", ""
	cfg.EngineMetrics.Interval = 0
	return cfg
}

// TestServeTLS: with listen_tls the OpenAI SDK, trusting the test's own
// certificate, completes a chat request and a streamed one through
// tollgate over HTTP/2; plain HTTP and an untrusting client are refused.
func TestServeTLS(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, pool := selfSigned(t, dir)
	cfg := quietConfig(t, startSimServer(t, sim.Config{Seed: 1}))
	cfg.ListenTLS = config.ListenTLS{CertFile: certFile, KeyFile: keyFile}
	addr, cancel, wait := startServe(t, cfg)

	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}}
	client := openai.NewClient(option.WithBaseURL("https://"+addr+"/v1/"), option.WithAPIKey("sk-tls"),
		option.WithHTTPClient(hc), option.WithMaxRetries(0))
	params := openai.ChatCompletionNewParams{Model: "Qwen/Qwen3-8B", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}}
	var resp *http.Response
	cc, err := client.Chat.Completions.New(t.Context(), params, option.WithResponseInto(&resp), option.WithHeader(sim.OutputTokensHeader, "5"))
	if err != nil {
		t.Fatalf("chat over TLS: %v", err)
	}
	if len(cc.Choices) != 1 || cc.Choices[0].Message.Content == "" || cc.Usage.CompletionTokens != 5 {
		t.Errorf("answer %+v", cc)
	}
	if resp.ProtoMajor != 2 || resp.TLS == nil {
		t.Errorf("protocol %s, TLS %v; want HTTP/2 over TLS", resp.Proto, resp.TLS != nil)
	}
	stream := client.Chat.Completions.NewStreaming(t.Context(), params, option.WithHeader(sim.OutputTokensHeader, "12"))
	var acc openai.ChatCompletionAccumulator
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	if err := stream.Err(); err != nil || len(acc.Choices) != 1 || acc.Choices[0].Message.Content == "" {
		t.Errorf("stream over TLS: err %v, %+v", err, acc.Choices)
	}

	// The header limit holds over HTTP/2 too: the server advertises it, so
	// Go's client refuses before sending; any other client gets 431.
	big, _ := http.NewRequest(http.MethodGet, "https://"+addr+"/v1/models", nil)
	big.Header.Set("X-Padding", strings.Repeat("a", 2<<20))
	if r, err := hc.Do(big); err == nil {
		r.Body.Close()
		if r.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			t.Errorf("2 MiB of headers over HTTP/2: %s %d, want refused", r.Proto, r.StatusCode)
		}
	} else if !strings.Contains(err.Error(), "header list larger than peer's advertised limit") {
		t.Errorf("2 MiB of headers over HTTP/2: %v", err)
	}

	// Plain HTTP to the TLS port: Go's server answers 400, never the proxy.
	plain, err := http.Post("http://"+addr+"/v1/chat/completions", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(plain.Body)
	plain.Body.Close()
	if plain.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "HTTPS") {
		t.Errorf("plain HTTP to the TLS listener: %d %s", plain.StatusCode, b)
	}
	// A client that does not trust the certificate stops at the handshake.
	_, err = http.Get("https://" + addr + "/v1/models")
	if ue := (x509.UnknownAuthorityError{}); !errors.As(err, &ue) {
		t.Errorf("untrusting client: %v; want an unknown-authority error", err)
	}

	cancel()
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	recs := allRequests(t, cfg.Store.SQLite.Path)
	if len(recs) != 2 {
		t.Fatalf("%d ledger rows, want the 2 requests over TLS", len(recs))
	}
	for _, r := range recs {
		if r.Status != 200 {
			t.Errorf("request %s recorded with status %d", r.RequestID, r.Status)
		}
	}
}

// TestServeTLSBadFiles: a missing certificate stops serve at start with
// the field named, whether the config comes from a file or not.
func TestServeTLSBadFiles(t *testing.T) {
	dir := t.TempDir()
	_, keyFile, _ := selfSigned(t, dir)
	missing := filepath.Join(dir, "nope.pem")
	cfgFile := filepath.Join(dir, "tollgate.yml")
	yml := fmt.Sprintf("listen: 127.0.0.1:0\nlisten_tls: {cert_file: %q, key_file: %q}\nstore: {sqlite: {path: %q}}\n", missing, keyFile, filepath.Join(dir, "t.db"))
	if err := os.WriteFile(cfgFile, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	want := "listen_tls.cert_file: stat " + missing + ": no such file or directory"
	if _, _, err := runCmd(t, "serve", "--config", cfgFile); err == nil || !strings.HasSuffix(err.Error(), want) {
		t.Errorf("serve --config: %v; want an error ending %q", err, want)
	}
	cfg := quietConfig(t, "http://127.0.0.1:1/v1")
	cfg.ListenTLS = config.ListenTLS{CertFile: missing, KeyFile: keyFile}
	if err := serve(t.Context(), cfg, slog.New(slog.DiscardHandler), nil); err == nil || err.Error() != want {
		t.Errorf("serve: %v; want %q", err, want)
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestSecretsStayOut: proxy keys (right and wrong), API tokens and
// upstream keys appear in no log line at debug level, from config load to
// shutdown, and neither they nor the prompt or completion text are in any
// file tollgate writes (ledger, write-ahead queue). A key given only as
// key_sha256 admits its key; others get OpenAI's 401 invalid_api_key.
func TestSecretsStayOut(t *testing.T) {
	const (
		proxyKey    = "sk-proxy-SECRET-a1b2c3"
		hashedKey   = "sk-hashed-SECRET-d4e5f6"
		wrongKey    = "sk-wrong-SECRET-778899"
		apiToken    = "tok-api-SECRET-0a0b0c"
		upstreamKey = "sk-upstream-SECRET-ddeeff"
		prompt      = "my phone is 13800138000 and the code word is PROMPT-MARKER-5150"
	)
	t.Setenv("TG_TEST_PROXY_KEY", proxyKey)
	t.Setenv("TG_TEST_API_TOKEN", apiToken)
	t.Setenv("TG_TEST_UPSTREAM_KEY", upstreamKey)
	dir := t.TempDir()
	simURL := startSimServer(t, sim.Config{Seed: 2})
	yml := fmt.Sprintf(`listen: 127.0.0.1:0
store: {sqlite: {path: %q}}
otlp: {http_listen: "", grpc_listen: ""}
engine_metrics: {interval: 0s}
upstreams:
  - {name: sim, url: %q, engine: vllm, api_key: "${TG_TEST_UPSTREAM_KEY}", models: [Qwen/Qwen3-8B]}
  - {name: dead, url: "http://127.0.0.1:1/v1", engine: openai, api_key: "${TG_TEST_UPSTREAM_KEY}", models: [dead-model]}
auth:
  keys:
    - {name: plain, key: "${TG_TEST_PROXY_KEY}", user_id: alice}
    - {name: hashed, key_sha256: %s, user_id: bob}
api:
  tokens:
    - {name: ops, token: "${TG_TEST_API_TOKEN}", role: read}
`, filepath.Join(dir, "t.db"), simURL, config.HashKey(hashedKey))
	cfgFile := filepath.Join(dir, "tollgate.yml")
	if err := os.WriteFile(cfgFile, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs lockedBuffer
	log := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	cfg, err := loadConfig(cfgFile, "", "", "", "")
	if err != nil {
		t.Fatal(err)
	}
	log.Debug("config loaded", "config", cfg) // as a careless debug line would
	ctx, cancel := context.WithCancel(context.Background())
	started, done := make(chan string, 1), make(chan error, 1)
	go func() { done <- serve(ctx, cfg, log, started) }()
	var addr string
	select {
	case addr = <-started:
	case err := <-done:
		t.Fatalf("serve: %v", err)
	}

	chat := func(key, model string) (*openai.ChatCompletion, error) {
		c := openai.NewClient(option.WithBaseURL("http://"+addr+"/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0))
		return c.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{Model: model,
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)}}, option.WithHeader(sim.OutputTokensHeader, "24"))
	}
	var answers []string
	for _, key := range []string{proxyKey, hashedKey} {
		cc, err := chat(key, "Qwen/Qwen3-8B")
		if err != nil {
			t.Fatalf("key %q refused: %v", key[:9], err)
		}
		answers = append(answers, cc.Choices[0].Message.Content)
	}
	for _, key := range []string{wrongKey, config.HashKey(hashedKey)} { // the digest itself is no key
		_, err := chat(key, "Qwen/Qwen3-8B")
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 401 || apiErr.Code != "invalid_api_key" || apiErr.Type != "invalid_request_error" {
			t.Errorf("key %q: %v; want OpenAI's 401 invalid_api_key", key[:9], err)
		}
	}
	if _, err := chat(proxyKey, "dead-model"); err == nil {
		t.Error("a request to an upstream that is down succeeded")
	}
	// The API: the proxy key does not open it, the token does.
	for _, c := range []struct {
		token string
		want  int
	}{{proxyKey, 401}, {wrongKey, 401}, {apiToken, 200}} {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/api/v1/requests?limit=1", nil)
		req.Header.Set("Authorization", "Bearer "+c.token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("API with %q: %d, want %d", c.token[:9], resp.StatusCode, c.want)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	secrets := []string{proxyKey, hashedKey, wrongKey, apiToken, upstreamKey, "PROMPT-MARKER-5150", "13800138000"}
	out := logs.String()
	if !strings.Contains(out, `"msg":"gateway listening"`) || !strings.Contains(out, "dead") {
		t.Fatalf("the log did not capture serve's lines (nothing would be proved):\n%s", out)
	}
	for _, s := range secrets {
		if strings.Contains(out, s) {
			t.Errorf("the log holds %q:\n%s", s, out)
		}
	}
	for _, a := range answers {
		if len(a) < 16 {
			t.Fatalf("answer %q too short to look for", a)
		}
	}
	secrets = append(secrets, answers...)
	noFileHolds(t, dir, cfgFile, secrets...)
	if recs := allRequests(t, cfg.Store.SQLite.Path); len(recs) != 5 {
		t.Errorf("%d ledger rows, want 5 (the searched files are the real ledger)", len(recs))
	}
}

// TestHeaderLimit: request headers beyond 1 MiB are refused with 431
// before any handler runs.
func TestHeaderLimit(t *testing.T) {
	cfg := quietConfig(t, "http://127.0.0.1:1/v1")
	addr, cancel, wait := startServe(t, cfg)
	defer func() { cancel(); _ = wait() }()
	for _, c := range []struct {
		size int
		want int
	}{{2 << 20, http.StatusRequestHeaderFieldsTooLarge}, {4 << 10, http.StatusOK}} {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/api/v1/reports", nil)
		req.Header.Set("X-Padding", strings.Repeat("a", c.size))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("%d-byte header: %d, want %d", c.size, resp.StatusCode, c.want)
		}
	}
}

// TestKeysHash: tollgate keys hash prints the digest that, as key_sha256,
// identifies the key; the key itself is never echoed.
func TestKeysHash(t *testing.T) {
	var out, errb bytes.Buffer
	if err := runKeys(t.Context(), []string{"hash"}, strings.NewReader("sk-abc\n"), &out, &errb); err != nil {
		t.Fatalf("keys hash: %v %s", err, errb.String())
	}
	digest := strings.TrimSpace(out.String())
	if digest != config.HashKey("sk-abc") || strings.Contains(out.String()+errb.String(), "sk-abc") {
		t.Fatalf("printed %q", out.String())
	}
	cfg, err := config.Parse(fmt.Appendf(nil, "auth:\n  keys:\n    - {key_sha256: %s, user_id: u}\n", digest), func(string) (string, bool) { return "", false })
	if err != nil || cfg.Auth.Keys[0].Hash() != config.HashKey("sk-abc") {
		t.Errorf("the printed digest as key_sha256: %v", err)
	}
	for _, c := range []struct {
		args  []string
		stdin string
	}{{[]string{"hash"}, "\n"}, {[]string{"hash"}, ""}, {nil, "sk-abc"}, {[]string{"show"}, "sk-abc"}} {
		out.Reset()
		if err := runKeys(t.Context(), c.args, strings.NewReader(c.stdin), &out, io.Discard); err == nil || out.Len() != 0 {
			t.Errorf("keys %v with stdin %q: err %v, printed %q; want an error and nothing printed", c.args, c.stdin, err, out.String())
		}
	}
}

// noFileHolds fails t if any file under dir (but skip) holds one of
// strs, or if dir holds no file at all (nothing would have been checked).
func noFileHolds(t *testing.T, dir, skip string, strs ...string) {
	t.Helper()
	var files int
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || p == skip {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		files++
		for _, s := range strs {
			if bytes.Contains(b, []byte(s)) {
				t.Errorf("%s holds %q", p, s)
			}
		}
		return nil
	})
	if err != nil || files == 0 {
		t.Fatalf("walk %s: %v, %d files", dir, err, files)
	}
}
