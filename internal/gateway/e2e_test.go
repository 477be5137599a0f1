package gateway

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/sim"
)

const simModel = "Qwen/Qwen3-8B"

// simEngine is a real simulator on loopback, recording what it served so
// tests can compare the engine's truth with the gateway's Record.
type simEngine struct {
	URL   string // …/v1
	mu    sync.Mutex
	stats map[string]sim.RequestStats // by traceparent
}

func startSim(t testing.TB, cfg sim.Config) *simEngine {
	t.Helper()
	se := &simEngine{stats: map[string]sim.RequestStats{}}
	cfg.OnFinish = func(s sim.RequestStats) {
		se.mu.Lock()
		se.stats[s.TraceParent] = s
		se.mu.Unlock()
	}
	if cfg.Seed == 0 {
		cfg.Seed = 1
	}
	// Fast engine: tests are about accounting, not speed.
	if cfg.DecodeBase == 0 {
		cfg.DecodeBase = 200 * time.Microsecond
	}
	eng, err := sim.New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = eng.Run(ctx); close(done) }()
	srv := httptest.NewServer(eng.Handler())
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		cancel()
		<-done
	})
	se.URL = srv.URL + "/v1"
	return se
}

// statsFor returns what the engine recorded for the request whose
// traceparent carried this span id.
func (se *simEngine) statsFor(t testing.TB, r *record.Record) sim.RequestStats {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		se.mu.Lock()
		for tp, s := range se.stats {
			if strings.Contains(tp, r.TraceID) && strings.Contains(tp, r.SpanID) {
				se.mu.Unlock()
				return s
			}
		}
		se.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatalf("the engine has no stats for trace %s span %s", r.TraceID, r.SpanID)
		}
		time.Sleep(5 * time.Millisecond) // polling with a deadline
	}
}

func simGateway(t testing.TB, se *simEngine) *testGateway {
	cfg := testConfig(se.URL)
	cfg.Upstreams[0].Models = []string{simModel}
	return newTestGateway(t, cfg)
}

var volatile = regexp.MustCompile(`"(id|created|system_fingerprint)":("[^"]*"|\d+)`)

// TestSimUsageExact: through the simulator, streamed and not, the Record's
// tokens equal the engine's own accounting exactly.
func TestSimUsageExact(t *testing.T) {
	se := startSim(t, sim.Config{})
	tg := simGateway(t, se)
	long := strings.Repeat("The shop policy says returns are free within thirty days. ", 30)
	body := func(stream bool) string {
		s := `{"model":"` + simModel + `","messages":[{"role":"system","content":"` + long + `"},{"role":"user","content":"Can I return shoes?"}]`
		if stream {
			s += `,"stream":true`
		}
		return s + `}`
	}
	for i, stream := range []bool{true, false, true, false} {
		resp := post(t, tg.URL+"/v1/chat/completions", body(stream), map[string]string{sim.OutputTokensHeader: "25"})
		readAll(t, resp)
		r := tg.next(t)
		st := se.statsFor(t, r)
		want := record.Usage{InputTokens: int64(st.PromptTokens), CachedInputTokens: int64(st.CachedTokens), OutputTokens: int64(st.OutputTokens), Source: record.SourceEngine}
		if r.Usage != want {
			t.Errorf("request %d (stream=%v): recorded %+v, engine counted %+v", i, stream, r.Usage, want)
		}
		if i >= 2 && r.Usage.CachedInputTokens == 0 {
			t.Errorf("request %d: no cached tokens on a repeated long prefix", i)
		}
		if r.Usage.OutputTokens != 25 || r.Status != 200 || r.FinishReason != "stop" {
			t.Errorf("request %d: %d output tokens, status %d, finish %q", i, r.Usage.OutputTokens, r.Status, r.FinishReason)
		}
		if stream && r.ContentChunks != 25 {
			t.Errorf("request %d: %d content chunks, want one per token", i, r.ContentChunks)
		}
		checkInvariants(t, r)
	}
}

// TestSimIncludeUsageStripped: a client that did not ask for usage gets
// exactly the bytes the engine sends without include_usage, while the
// Record still has the engine's usage.
func TestSimIncludeUsageStripped(t *testing.T) {
	behind := startSim(t, sim.Config{Seed: 9})
	direct := startSim(t, sim.Config{Seed: 9})
	tg := simGateway(t, behind)
	const req = `{"model":"` + simModel + `","messages":[{"role":"user","content":"Say something long."}],"stream":true}`
	hdr := map[string]string{sim.OutputTokensHeader: "40"}

	viaGateway := readAll(t, post(t, tg.URL+"/v1/chat/completions", req, hdr))
	straight := readAll(t, post(t, direct.URL+"/chat/completions", req, hdr))
	norm := func(b []byte) string { return volatile.ReplaceAllString(string(b), `"$1":_`) }
	if norm(viaGateway) != norm(straight) {
		t.Errorf("client bytes differ from the engine's own stream without include_usage:\ngateway: %s\n engine: %s", viaGateway, straight)
	}
	if strings.Contains(string(viaGateway), `"usage"`) {
		t.Error("the injected usage chunk reached the client")
	}
	r := tg.next(t)
	if r.Usage.Source != record.SourceEngine || r.Usage.OutputTokens != 40 || r.Usage.InputTokens == 0 {
		t.Errorf("usage = %+v, want the engine's (40 output tokens)", r.Usage)
	}
	checkInvariants(t, r)
}

func TestSimFaults(t *testing.T) {
	se := startSim(t, sim.Config{Faults: sim.Faults{StallFor: 2 * time.Second}})
	cfg := testConfig(se.URL)
	cfg.Upstreams[0].Models = []string{simModel}
	// Long enough that a reset is never taken for a stall on a loaded
	// machine (CI once saw reset-after=5 end as idle_timeout at 200 ms),
	// and under StallFor, so the stall case still stalls past it.
	cfg.Upstreams[0].Timeouts.Idle = time.Second
	cfg.Retry.Attempts = 1
	tg := newTestGateway(t, cfg)
	const req = `{"model":"` + simModel + `","messages":[{"role":"user","content":"hi"}],"stream":true}`
	cases := []struct {
		fault      string
		wantStatus int
		wantType   string
		wantOut    int64
		wantClient string
	}{
		{"error", 500, record.ErrUpstreamStatus, 0, ""},
		{"status=429", 429, record.ErrUpstreamStatus, 0, ""},
		{"reset-after=5", 502, record.ErrUpstreamReset, 5, `"code":"upstream_reset"`},
		{"stall-after=3", 504, record.ErrIdleTimeout, 3, `"code":"idle_timeout"`},
		{"malformed-after=4", 502, record.ErrMalformed, 4, `"code":"malformed_response"`},
	}
	for _, tc := range cases {
		t.Run(tc.fault, func(t *testing.T) {
			resp := post(t, tg.URL+"/v1/chat/completions", req, map[string]string{sim.FaultHeader: tc.fault, sim.OutputTokensHeader: "20"})
			b := readAll(t, resp)
			if tc.wantClient != "" && !strings.Contains(string(b), tc.wantClient) {
				t.Errorf("client did not get a terminating error event with %s: %s", tc.wantClient, b)
			}
			if tc.wantClient == "" && resp.StatusCode != tc.wantStatus {
				t.Errorf("client status %d, want %d", resp.StatusCode, tc.wantStatus)
			}
			r := tg.next(t)
			if r.Status != tc.wantStatus || r.ErrorType != tc.wantType || r.Usage.OutputTokens != tc.wantOut {
				t.Errorf("recorded %d %q %d output tokens; want %d %q %d", r.Status, r.ErrorType, r.Usage.OutputTokens, tc.wantStatus, tc.wantType, tc.wantOut)
			}
			checkInvariants(t, r)
		})
	}
}

func TestSimClientDisconnect(t *testing.T) {
	se := startSim(t, sim.Config{DecodeBase: 2 * time.Millisecond})
	tg := simGateway(t, se)
	const req = `{"model":"` + simModel + `","messages":[{"role":"user","content":"hi"}],"stream":true}`
	resp := post(t, tg.URL+"/v1/chat/completions", req, map[string]string{sim.OutputTokensHeader: "500"})
	br := bufio.NewReader(resp.Body)
	read := 0
	for read < 6 { // the role chunk and five tokens
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(line, "data: ") {
			read++
		}
	}
	resp.Body.Close()
	r := tg.next(t)
	if r.Status != record.StatusClientClosed || r.ErrorType != record.ErrClientDisconnect {
		t.Fatalf("recorded %d %q, want 499 client_disconnect", r.Status, r.ErrorType)
	}
	if r.Usage.OutputTokens < 5 || r.Usage.OutputTokens >= 500 {
		t.Errorf("partial output tokens = %d, want what was streamed before the client left (≥5, <500)", r.Usage.OutputTokens)
	}
	checkInvariants(t, r)
	// The engine saw the cancellation and freed the sequence.
	if st := se.statsFor(t, r); st.FinishReason != "abort" {
		t.Errorf("engine finish = %q, want abort", st.FinishReason)
	}
}

func TestSimRetryOnAnotherUpstream(t *testing.T) {
	broken := startSim(t, sim.Config{Faults: sim.Faults{ErrorRate: 1}})
	good := startSim(t, sim.Config{})
	cfg := testConfig(good.URL)
	cfg.Upstreams = []config.Upstream{
		{Name: "broken", URL: broken.URL, Engine: "vllm", Models: []string{simModel}},
		{Name: "good", URL: good.URL, Engine: "vllm", Models: []string{simModel}},
	}
	cfg.Retry.OnStatus = []int{500}
	tg := newTestGateway(t, cfg)
	const req = `{"model":"` + simModel + `","messages":[{"role":"user","content":"hi"}]}`
	var attempts []*record.Record
	for range 2 { // one of the two starts at "broken"
		resp := post(t, tg.URL+"/v1/chat/completions", req, nil)
		if b := readAll(t, resp); resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, b)
		}
		r := tg.next(t)
		attempts = append(attempts, r)
		if r.Upstream == "broken" {
			attempts = append(attempts, tg.next(t))
		}
	}
	if len(attempts) != 3 {
		t.Fatalf("%d records for 2 requests, want 3 (one retried)", len(attempts))
	}
	for _, r := range attempts {
		if r.Upstream == "broken" && (r.Attempt != 1 || r.Status != 500) {
			t.Errorf("failed attempt = #%d %d", r.Attempt, r.Status)
		}
		if r.Upstream == "good" && r.Status != 200 {
			t.Errorf("good attempt = %d", r.Status)
		}
	}
}

// TestOpenAISDK drives the gateway with the official OpenAI Go SDK and
// compares what the SDK observed with what the gateway recorded.
func TestOpenAISDK(t *testing.T) {
	se := startSim(t, sim.Config{})
	tg := simGateway(t, se)
	client := openai.NewClient(option.WithBaseURL(tg.URL+"/v1"), option.WithAPIKey("sk-sdk"), option.WithMaxRetries(0))
	ctx := context.Background()
	params := openai.ChatCompletionNewParams{
		Model:    simModel,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("You are terse."), openai.UserMessage("Name three colours.")},
	}

	t.Run("stream", func(t *testing.T) {
		p := params
		p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
		var httpResp *http.Response
		stream := client.Chat.Completions.NewStreaming(ctx, p, option.WithResponseInto(&httpResp), option.WithHeader(sim.OutputTokensHeader, "30"))
		var acc openai.ChatCompletionAccumulator
		chunks := 0
		for stream.Next() {
			c := stream.Current()
			acc.AddChunk(c)
			if len(c.Choices) > 0 && c.Choices[0].Delta.Content != "" {
				chunks++
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		r := tg.next(t)
		if httpResp.Header.Get("X-Request-Id") != r.RequestID {
			t.Errorf("SDK saw request id %q, recorded %q", httpResp.Header.Get("X-Request-Id"), r.RequestID)
		}
		u := acc.Usage
		if r.Usage.InputTokens != u.PromptTokens || r.Usage.OutputTokens != u.CompletionTokens || r.Usage.CachedInputTokens != u.PromptTokensDetails.CachedTokens {
			t.Errorf("SDK usage %d/%d/%d cached, recorded %+v", u.PromptTokens, u.CompletionTokens, u.PromptTokensDetails.CachedTokens, r.Usage)
		}
		if r.ContentChunks != chunks || chunks != 30 {
			t.Errorf("SDK saw %d content chunks, recorded %d (want 30)", chunks, r.ContentChunks)
		}
		if len(acc.Choices) == 0 || string(acc.Choices[0].FinishReason) != r.FinishReason || acc.Model != r.ServedModel {
			t.Errorf("SDK finish/model %v %q, recorded %q %q", acc.Choices, acc.Model, r.FinishReason, r.ServedModel)
		}
		if r.Usage.Source != record.SourceEngine || !r.IncludeUsage {
			t.Errorf("source %q include_usage %v", r.Usage.Source, r.IncludeUsage)
		}
		checkInvariants(t, r)
	})

	t.Run("non-stream", func(t *testing.T) {
		p := params
		p.MaxTokens = openai.Int(7)
		var httpResp *http.Response
		cc, err := client.Chat.Completions.New(ctx, p, option.WithResponseInto(&httpResp))
		if err != nil {
			t.Fatal(err)
		}
		r := tg.next(t)
		if cc.Usage.PromptTokens != r.Usage.InputTokens || cc.Usage.CompletionTokens != r.Usage.OutputTokens || cc.Usage.CompletionTokens != 7 {
			t.Errorf("SDK usage %+v, recorded %+v", cc.Usage, r.Usage)
		}
		if string(cc.Choices[0].FinishReason) != "length" || r.FinishReason != "length" {
			t.Errorf("finish: SDK %q, recorded %q; want length (max_tokens)", cc.Choices[0].FinishReason, r.FinishReason)
		}
		if r.MaxTokens == nil || *r.MaxTokens != 7 {
			t.Errorf("max_tokens recorded %v", r.MaxTokens)
		}
		if !strings.Contains(httpResp.Header.Get("Server-Timing"), "upstream;dur=") {
			t.Errorf("Server-Timing = %q", httpResp.Header.Get("Server-Timing"))
		}
	})

	t.Run("error", func(t *testing.T) {
		p := params
		p.Model = "no-such-model"
		_, err := client.Chat.Completions.New(ctx, p)
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 404 || apiErr.Code != "model_not_found" {
			t.Errorf("SDK error = %v, want a 404 model_not_found APIError", err)
		}
		if r := tg.next(t); r.ErrorType != record.ErrNoRoute {
			t.Errorf("recorded %q", r.ErrorType)
		}
	})
}

// TestSimOtherEndpoints: completions (streamed) and embeddings record the
// engine's usage too.
func TestSimOtherEndpoints(t *testing.T) {
	se := startSim(t, sim.Config{})
	tg := simGateway(t, se)

	b := readAll(t, post(t, tg.URL+"/v1/embeddings", `{"model":"`+simModel+`","input":["hello world","tollgate"]}`, nil))
	r := tg.next(t)
	if r.Endpoint != "embeddings" || r.Status != 200 || r.Usage.InputTokens == 0 || r.Usage.OutputTokens != 0 || r.Usage.Source != record.SourceEngine {
		t.Errorf("embeddings record: %+v (%s)", r.Usage, b)
	}
	if !strings.Contains(string(b), `"prompt_tokens":`+itoa64(r.Usage.InputTokens)) {
		t.Errorf("recorded %d input tokens, response says %s", r.Usage.InputTokens, b)
	}

	readAll(t, post(t, tg.URL+"/v1/completions", `{"model":"`+simModel+`","prompt":"Once upon a time","stream":true,"max_tokens":12}`, nil))
	r = tg.next(t)
	st := se.statsFor(t, r)
	if r.Endpoint != "completions" || r.Usage.OutputTokens != 12 || r.Usage.InputTokens != int64(st.PromptTokens) || r.FinishReason != "length" || r.ContentChunks != 12 {
		t.Errorf("completions record: %+v finish %q chunks %d (engine %+v)", r.Usage, r.FinishReason, r.ContentChunks, st)
	}
	checkInvariants(t, r)
}

func itoa64(n int64) string { return strconv.FormatInt(n, 10) }

func TestHealthAndReady(t *testing.T) {
	tg := newTestGateway(t, testConfig("http://127.0.0.1:9/v1"))
	for _, p := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get(tg.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, resp)
		if resp.StatusCode != 200 {
			t.Errorf("%s = %d", p, resp.StatusCode)
		}
	}
	resp, err := http.Get(tg.URL + "/nope") // not under /v1/: no pass-through
	if err != nil {
		t.Fatal(err)
	}
	if b := readAll(t, resp); resp.StatusCode != 404 || *decodeErr(t, b).Error.Code != "unknown_url" {
		t.Errorf("unknown path: %d %s", resp.StatusCode, b)
	}
}

// TestReadyDetail: /readyz answers 200 with the detail lines of a
// dependency that is degraded but not failing (a store not connected
// while the queue keeps its Records), 503 with them when Ready fails, and
// 503 "draining" once Drain is called.
func TestReadyDetail(t *testing.T) {
	var (
		detail []string
		fail   error
	)
	tg := newTestGatewayWith(t, testConfig("http://127.0.0.1:9/v1"), func(o *Options) {
		o.Ready = func() ([]string, error) { return detail, fail }
	})
	for _, tc := range []struct {
		detail     []string
		fail       error
		wantStatus int
		wantBody   string
	}{
		{nil, nil, 200, "ready\n"},
		{[]string{"store: clickhouse not connected: down"}, nil, 200, "ready\nstore: clickhouse not connected: down\n"},
		{[]string{"store: clickhouse connected"}, errors.New("queue full"), 503, "not ready: queue full\nstore: clickhouse connected\n"},
	} {
		detail, fail = tc.detail, tc.fail
		resp, err := http.Get(tg.URL + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		if b := readAll(t, resp); resp.StatusCode != tc.wantStatus || string(b) != tc.wantBody {
			t.Errorf("Ready() = %q, %v: /readyz answered %d %q, want %d %q", tc.detail, tc.fail, resp.StatusCode, b, tc.wantStatus, tc.wantBody)
		}
	}
	detail, fail = nil, nil
	tg.G.Drain()
	resp, err := http.Get(tg.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	if b := readAll(t, resp); resp.StatusCode != 503 || string(b) != "draining\n" {
		t.Errorf("draining: /readyz answered %d %q", resp.StatusCode, b)
	}
}
