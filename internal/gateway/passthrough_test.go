package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/quota"
	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/sim"
)

const (
	imageModel = "gpt-image-1"
	audioModel = "gpt-4o-transcribe"
)

// mediaConfig: a chat upstream that is never reached (its model has no
// tokenizer to load), and the simulator
// serving the media models, which /v1/audio/ defaults to.
func mediaConfig(simURL string) *config.Config {
	cfg := testConfig(simURL)
	cfg.Upstreams[0].Name = "media"
	cfg.Upstreams[0].Models = []string{imageModel, audioModel}
	cfg.Upstreams = append(cfg.Upstreams, config.Upstream{Name: "chat", URL: "http://127.0.0.1:9/v1", Engine: "vllm", Models: []string{"chat-model"}})
	cfg.Passthrough.Upstreams = map[string]string{"/v1/audio/": "media"}
	return cfg
}

// passCount waits, up to a deadline, for the pass-through counter to
// reach want (it counts as the handler returns, just after the Record is
// handed on) and returns its value.
func passCount(tg *testGateway, endpoint, code string, want float64) float64 {
	deadline := time.Now().Add(5 * time.Second)
	for {
		n := testutil.ToFloat64(tg.G.pass.requests.WithLabelValues(endpoint, code))
		if n == want || time.Now().After(deadline) {
			return n
		}
		time.Sleep(time.Millisecond) // polling with a deadline
	}
}

// TestPassthroughImages: an image generation goes through to the engine
// routed by its model, and its Record carries the usage the answer
// reported, the bytes and the timing.
func TestPassthroughImages(t *testing.T) {
	se := startSim(t, sim.Config{Models: []string{imageModel, audioModel}})
	tg := newTestGateway(t, mediaConfig(se.URL))

	resp := post(t, tg.URL+"/v1/images/generations", `{"model":"`+imageModel+`","prompt":"a lighthouse at dusk, oil on canvas","n":2}`, nil)
	body := readAll(t, resp)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	var ans struct {
		Data  []json.RawMessage `json:"data"`
		Usage struct {
			InputTokens  int64 `json:"input_tokens"`
			OutputTokens int64 `json:"output_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(body, &ans); err != nil || len(ans.Data) != 2 || ans.Usage.InputTokens == 0 {
		t.Fatalf("answer %s (%v)", body, err)
	}
	r := tg.next(t)
	if r.Endpoint != "images_generations" || r.Model != imageModel || r.Upstream != "media" || r.Status != 200 || r.ErrorType != "" {
		t.Errorf("record: endpoint %q model %q upstream %q status %d error %q", r.Endpoint, r.Model, r.Upstream, r.Status, r.ErrorType)
	}
	if r.Usage.InputTokens != ans.Usage.InputTokens || r.Usage.OutputTokens != 2*sim.ImageTokens || r.Usage.Source != record.SourceEngine {
		t.Errorf("usage %+v, the answer said %+v", r.Usage, ans.Usage)
	}
	if r.ResponseBytes != int64(len(body)) || r.RequestBytes == 0 {
		t.Errorf("bytes: response %d (client got %d), request %d", r.ResponseBytes, len(body), r.RequestBytes)
	}
	if m := r.Marks; m.UpstreamSent == 0 || m.UpstreamHeaders < m.UpstreamSent || m.End < m.UpstreamHeaders || m.FirstClientToken != 0 {
		t.Errorf("marks %+v: want sent ≤ headers ≤ end and no token marks", m)
	}
	if n := passCount(tg, "images_generations", "200", 1); n != 1 {
		t.Errorf("tollgate_passthrough_requests_total{images_generations,200} = %v", n)
	}
	tg.noMore(t)
}

// gateReader is an upload body: it sends head, waits until the engine
// has read part of the upload, then sends tail. A gateway that held the
// whole body before forwarding it never lets the engine read anything
// before tail is sent, and the upload fails at the deadline.
type gateReader struct {
	head, tail []byte
	gate       <-chan struct{}
	pos        int
	err        error
}

func (g *gateReader) Read(p []byte) (int, error) {
	if g.pos == len(g.head) && g.gate != nil {
		select {
		case <-g.gate:
			g.gate = nil
		case <-time.After(10 * time.Second):
			g.err = fmt.Errorf("the engine read nothing of the upload while %d bytes were sent: the gateway buffers it", len(g.head))
			return 0, g.err
		}
	}
	all := len(g.head) + len(g.tail)
	if g.pos == all {
		return 0, io.EOF
	}
	var src []byte
	if g.pos < len(g.head) {
		src = g.head[g.pos:]
	} else {
		src = g.tail[g.pos-len(g.head):]
	}
	n := copy(p, src)
	g.pos += n
	return n, nil
}

// multipartUpload builds a transcription upload of a file of size bytes,
// with the model field before the file or after it.
func multipartUpload(t *testing.T, size int, modelFirst bool) (body []byte, ctype string, sum string) {
	t.Helper()
	file := make([]byte, size)
	rnd := rand.New(rand.NewPCG(1, 2))
	for i := range file {
		file[i] = byte(rnd.Uint32())
	}
	h := sha256.Sum256(file)
	var b strings.Builder
	mw := multipart.NewWriter(&b)
	if modelFirst {
		_ = mw.WriteField("model", audioModel)
	}
	fw, err := mw.CreateFormFile("file", "meeting.mp3")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = fw.Write(file)
	if !modelFirst {
		_ = mw.WriteField("model", audioModel)
	}
	_ = mw.WriteField("response_format", "json")
	_ = mw.Close()
	return []byte(b.String()), mw.FormDataContentType(), hex.EncodeToString(h[:])
}

// TestPassthroughMultipartStreams: a transcription upload six times
// limits.max_request_bytes (and a hundred times the gateway's peek) goes
// through streamed — the engine reads its first megabytes while the client
// still holds the rest — whole and unchanged, and its Record has the
// model from the form field before the file and the answer's usage.
func TestPassthroughMultipartStreams(t *testing.T) {
	started := make(chan struct{})
	var once atomic.Bool
	// The engine, watched: started closes once it has read 1 MiB of the body.
	watched := startSimWrapped(t, sim.Config{Models: []string{imageModel, audioModel}}, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			r.Body = &watchBody{ReadCloser: r.Body, after: 1 << 20, hit: func() {
				if once.CompareAndSwap(false, true) {
					close(started)
				}
			}}
			h.ServeHTTP(w, r)
		})
	})
	cfg := mediaConfig(watched)
	cfg.Limits.MaxRequestBytes = 1 << 20
	cfg.Limits.MaxBufferedBytes = 2 * cfg.Limits.MaxResponseBytes
	tg := newTestGateway(t, cfg)

	const size = 6 << 20
	body, ctype, sum := multipartUpload(t, size, true)
	half := len(body) / 2
	src := &gateReader{head: body[:half], tail: body[half:], gate: started}
	req, err := http.NewRequest(http.MethodPost, tg.URL+"/v1/audio/transcriptions", src)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", ctype) // no Content-Length: sent chunked
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%v (reader: %v)", err, src.err)
	}
	ans := readAll(t, resp)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s (reader: %v)", resp.StatusCode, ans, src.err)
	}
	if got := resp.Header.Get("X-Sim-File-Bytes"); got != strconv.Itoa(size) || resp.Header.Get("X-Sim-File-Sha256") != sum {
		t.Errorf("the engine got %s bytes with sha256 %s; sent %d with %s", got, resp.Header.Get("X-Sim-File-Sha256"), size, sum)
	}
	r := tg.next(t)
	wantIn := int64((size + sim.AudioBytesPerToken - 1) / sim.AudioBytesPerToken)
	if r.Endpoint != "audio_transcriptions" || r.Model != audioModel || r.Upstream != "media" || r.Status != 200 {
		t.Errorf("record: endpoint %q model %q upstream %q status %d %s", r.Endpoint, r.Model, r.Upstream, r.Status, r.ErrorMessage)
	}
	if r.RequestBytes != int64(len(body)) || r.ResponseBytes != int64(len(ans)) {
		t.Errorf("bytes: request %d (sent %d), response %d (got %d)", r.RequestBytes, len(body), r.ResponseBytes, len(ans))
	}
	if r.Usage.InputTokens != wantIn || r.Usage.OutputTokens == 0 {
		t.Errorf("usage %+v, want %d input tokens", r.Usage, wantIn)
	}
}

// TestPassthroughFileFirst: a form whose file comes before its model is
// routed by passthrough.upstreams, its Record without a model.
func TestPassthroughFileFirst(t *testing.T) {
	se := startSim(t, sim.Config{Models: []string{imageModel, audioModel}})
	tg := newTestGateway(t, mediaConfig(se.URL))
	body, ctype, _ := multipartUpload(t, 200<<10, false)
	resp := post(t, tg.URL+"/v1/audio/transcriptions", string(body), map[string]string{"Content-Type": ctype})
	if b := readAll(t, resp); resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	r := tg.next(t)
	if r.Model != "" || r.Upstream != "media" || r.Usage.InputTokens != 200 {
		t.Errorf("record: model %q upstream %q usage %+v", r.Model, r.Upstream, r.Usage)
	}
}

// TestPassthroughUploadTooLarge: a streamed body over
// passthrough.max_upload_bytes is refused 413 and recorded, whether its
// length was declared or found out on the way.
func TestPassthroughUploadTooLarge(t *testing.T) {
	se := startSim(t, sim.Config{Models: []string{imageModel, audioModel}})
	cfg := mediaConfig(se.URL)
	cfg.Passthrough.MaxUploadBytes = 256 << 10
	tg := newTestGateway(t, cfg)
	body, ctype, _ := multipartUpload(t, 1<<20, true)
	for _, declared := range []bool{true, false} {
		var src io.Reader = strings.NewReader(string(body))
		if !declared {
			src = io.MultiReader(src) // hides the length: sent chunked
		}
		req, _ := http.NewRequest(http.MethodPost, tg.URL+"/v1/audio/transcriptions", src)
		req.Header.Set("Content-Type", ctype)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b := readAll(t, resp)
		if resp.StatusCode != 413 || *decodeErr(t, b).Error.Code != "request_too_large" {
			t.Errorf("declared %t: %d %s", declared, resp.StatusCode, b)
		}
		r := tg.next(t)
		if r.Status != 413 || r.ErrorType != record.ErrInvalidRequest || r.Endpoint != "audio_transcriptions" {
			t.Errorf("declared %t: record status %d error %q endpoint %q", declared, r.Status, r.ErrorType, r.Endpoint)
		}
	}
}

// TestPassthroughDeniedAndUnknown: a denied path is answered 403 and an
// unknown one 404 by the gateway itself, an engine's own 404 is relayed,
// and each has its Record and its count.
func TestPassthroughDeniedAndUnknown(t *testing.T) {
	se := startSim(t, sim.Config{Models: []string{imageModel, audioModel}})
	tg := newTestGateway(t, mediaConfig(se.URL))
	for _, tc := range []struct {
		method, path string
		status       int
		code         string // the error code the client sees
		endpoint     string
		errType      string
		reached      bool
	}{
		{"POST", "/v1/organization/admin_api_keys", 403, "path_denied", "organization", record.ErrPathDenied, false},
		{"GET", "/v1/organization", 403, "path_denied", "organization", record.ErrPathDenied, false},
		{"GET", "/nope", 404, "unknown_url", "other", record.ErrUnknownURL, false},
		{"GET", "/v2/chat/completions", 404, "unknown_url", "other", record.ErrUnknownURL, false},
		// Not served by the engine: its own 404, relayed.
		{"GET", "/v1/batches?limit=2", 404, "", "batches", record.ErrUpstreamStatus, true},
		{"POST", "/v1/made_up/thing", 404, "", "other", record.ErrUpstreamStatus, true},
	} {
		req, _ := http.NewRequest(tc.method, tg.URL+tc.path, strings.NewReader(`{"model":"`+imageModel+`"}`))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b := readAll(t, resp)
		if resp.StatusCode != tc.status {
			t.Errorf("%s %s: %d %s", tc.method, tc.path, resp.StatusCode, b)
		}
		if tc.code != "" {
			if e := decodeErr(t, b); e.Error.Code == nil || *e.Error.Code != tc.code {
				t.Errorf("%s %s: error %s, want code %s", tc.method, tc.path, b, tc.code)
			}
		}
		r := tg.next(t)
		if r.Status != tc.status || r.Endpoint != tc.endpoint || r.ErrorType != tc.errType || (r.Marks.UpstreamSent > 0) != tc.reached {
			t.Errorf("%s %s: record status %d endpoint %q error %q sent %v", tc.method, tc.path, r.Status, r.Endpoint, r.ErrorType, r.Marks.UpstreamSent)
		}
		if r.RequestID == "" || resp.Header.Get(TollgateRequestIDHeader) != r.RequestID {
			t.Errorf("%s %s: request id %q, header %q", tc.method, tc.path, r.RequestID, resp.Header.Get(TollgateRequestIDHeader))
		}
	}
	for _, c := range []struct {
		endpoint, code string
		want           float64
	}{{"organization", "403", 2}, {"other", "404", 3}, {"batches", "404", 1}} {
		if n := passCount(tg, c.endpoint, c.code, c.want); n != c.want {
			t.Errorf("tollgate_passthrough_requests_total{%s,%s} = %v, want %v", c.endpoint, c.code, n, c.want)
		}
	}
}

// TestPassthroughKeysAndQuotas: pass-through answers to the same keys and
// quotas as chat. A revoked key is refused; an image generation's usage
// is charged to the key's daily tokens, after which both a pass-through
// request and a chat request are refused.
func TestPassthroughKeysAndQuotas(t *testing.T) {
	se := startSim(t, sim.Config{Models: []string{imageModel, audioModel}})
	cfg := mediaConfig(se.URL)
	cfg.Auth.Keys = []config.Key{{Name: "bot", KeySHA256: config.HashKey("sk-bot"), UserID: "bot"}}
	cfg.Quotas.Keys = map[string]quota.Limits{"bot": {DailyTokens: 1000}}
	qc, err := cfg.QuotaConfig()
	if err != nil {
		t.Fatal(err)
	}
	lim, err := quota.NewLocal(qc, time.Now, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	tg := gatewayWith(t, cfg, nil, lim)
	img := `{"model":"` + imageModel + `","prompt":"a red bicycle"}`

	resp := post(t, tg.URL+"/v1/images/generations", img, map[string]string{"Authorization": "Bearer sk-revoked"})
	if b := readAll(t, resp); resp.StatusCode != 401 {
		t.Errorf("revoked key: %d %s", resp.StatusCode, b)
	}
	if r := tg.next(t); r.Status != 401 || r.ErrorType != record.ErrAuth || r.Marks.UpstreamSent != 0 {
		t.Errorf("revoked key: record status %d error %q", r.Status, r.ErrorType)
	}

	bot := map[string]string{"Authorization": "Bearer sk-bot"}
	resp = post(t, tg.URL+"/v1/images/generations", img, bot)
	if b := readAll(t, resp); resp.StatusCode != 200 {
		t.Fatalf("first image: %d %s", resp.StatusCode, b)
	}
	if r := tg.next(t); r.UserID != "bot" || r.Usage.Total() <= 1000 {
		t.Fatalf("first image: user %q usage %+v (the test needs it above the quota)", r.UserID, r.Usage)
	}
	for _, p := range []struct{ path, body string }{{"/v1/images/generations", img}, {"/v1/chat/completions", `{"model":"chat-model","messages":[{"role":"user","content":"hi"}]}`}} {
		resp := post(t, tg.URL+p.path, p.body, bot)
		if b := readAll(t, resp); resp.StatusCode != 429 {
			t.Errorf("%s over the daily quota: %d %s", p.path, resp.StatusCode, b)
		}
		if r := tg.next(t); r.Status != 429 || r.ErrorType != record.ErrRateLimited {
			t.Errorf("%s: record status %d error %q", p.path, r.Status, r.ErrorType)
		}
	}
}

// watchBody calls hit once more than after bytes were read.
type watchBody struct {
	io.ReadCloser
	n, after int
	hit      func()
}

func (b *watchBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if b.n += n; b.n > b.after {
		b.hit()
	}
	return n, err
}

// startSimWrapped runs a simulator whose handler is wrapped, and returns
// its …/v1 URL.
func startSimWrapped(t *testing.T, cfg sim.Config, wrap func(http.Handler) http.Handler) string {
	t.Helper()
	cfg.Seed, cfg.DecodeBase = 1, 200*time.Microsecond
	eng, err := sim.New(cfg, discardLog(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = eng.Run(ctx); close(done) }()
	srv := httptest.NewServer(wrap(eng.Handler()))
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		cancel()
		<-done
	})
	return srv.URL + "/v1"
}

// TestPassthroughStreamedUsage: a streamed transcription (OpenAI's
// transcript.text.* events) is relayed byte for byte, and the usage of
// its last event is the Record's. The upstream plays a recorded stream;
// the query string reaches it too.
func TestPassthroughStreamedUsage(t *testing.T) {
	const stream = "data: {\"type\":\"transcript.text.delta\",\"delta\":\"The \"}\n\n" +
		"data: {\"type\":\"transcript.text.delta\",\"delta\":\"meeting\"}\n\n" +
		"data: {\"type\":\"transcript.text.done\",\"text\":\"The meeting\",\"usage\":{\"type\":\"tokens\",\"input_tokens\":14,\"input_token_details\":{\"text_tokens\":0,\"audio_tokens\":14},\"output_tokens\":45,\"total_tokens\":59}}\n\n"
	up := newTranscriptUpstream(t, stream)
	var seen atomic.Value
	wrapped := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Store(r.URL.RequestURI())
		up.srv.Config.Handler.ServeHTTP(w, r)
	}))
	t.Cleanup(wrapped.Close)
	tg := newTestGateway(t, testConfig(wrapped.URL+"/v1"))

	body, ctype, _ := multipartUpload(t, 4096, true)
	resp := post(t, tg.URL+"/v1/audio/transcriptions?timestamp_granularities=word", string(body), map[string]string{"Content-Type": ctype})
	got := readAll(t, resp)
	if resp.StatusCode != 200 || string(got) != stream || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("%d %q %q", resp.StatusCode, resp.Header.Get("Content-Type"), got)
	}
	if u := seen.Load(); u != "/v1/audio/transcriptions?timestamp_granularities=word" {
		t.Errorf("the upstream was asked for %v", u)
	}
	r := tg.next(t)
	if r.Usage.InputTokens != 14 || r.Usage.OutputTokens != 45 || r.Model != audioModel || r.ResponseBytes != int64(len(stream)) {
		t.Errorf("record: usage %+v model %q response bytes %d", r.Usage, r.Model, r.ResponseBytes)
	}
}

func TestPassEndpoint(t *testing.T) {
	for path, want := range map[string]string{
		"/v1/audio/transcriptions":        "audio_transcriptions",
		"/v1/audio/speech":                "audio_speech",
		"/v1/audio/voices":                "audio",
		"/v1/images/edits":                "images_edits",
		"/v1/files/file-abc/content":      "files",
		"/v1/chat/completions/chatcmpl-1": "chat",
		"/v1/organization/usage/costs":    "organization",
		"/v1/Files":                       "other",
		"/v1/":                            "other",
		"/v2/files":                       "other",
		"/healthz2":                       "other",
	} {
		if got := passEndpoint(path); got != want {
			t.Errorf("passEndpoint(%q) = %q, want %q", path, got, want)
		}
	}
}

func TestMultipartModel(t *testing.T) {
	form := func(parts ...string) []byte {
		var b strings.Builder
		for _, p := range parts {
			b.WriteString("--B\r\n" + p + "\r\n")
		}
		b.WriteString("--B--\r\n")
		return []byte(b.String())
	}
	model := "Content-Disposition: form-data; name=\"model\"\r\n\r\nwhisper-large-v3"
	file := "Content-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\nContent-Type: audio/wav\r\n\r\nRIFF...."
	lang := "Content-Disposition: form-data; name=\"language\"\r\n\r\nen"
	for _, tc := range []struct {
		name string
		head []byte
		want string
	}{
		{"model first", form(model, file), "whisper-large-v3"},
		{"after another field", form(lang, model, file), "whisper-large-v3"},
		{"file first", form(file, model), ""},
		{"cut inside the model field", form(model)[:60], ""},
		{"too long", form("Content-Disposition: form-data; name=\"model\"\r\n\r\n" + strings.Repeat("m", MaxIdentifier+1)), ""},
		{"not multipart", []byte("{\"model\":\"x\"}"), ""},
	} {
		if got := multipartModel(tc.head, "B"); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// FuzzMultipartModel: whatever a client sends, reading the model ahead
// of the file neither panics nor returns more than MaxIdentifier bytes.
func FuzzMultipartModel(f *testing.F) {
	f.Add([]byte("--B\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nm\r\n--B--\r\n"), "B")
	f.Add([]byte("--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"x\"\r\n\r\n\x00\x01\r\n--B--"), "B")
	f.Fuzz(func(t *testing.T, head []byte, boundary string) {
		if boundary == "" {
			return
		}
		if m := multipartModel(head, boundary); len(m) > MaxIdentifier {
			t.Fatalf("model of %d bytes", len(m))
		}
	})
}
