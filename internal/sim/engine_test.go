package sim

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
)

func TestQueueingOverHTTP(t *testing.T) {
	cfg := fastConfig()
	cfg.MaxRunning = 1
	h := start(t, cfg)
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			resp := h.post("/v1/chat/completions", chatBody("queue me"), OutputTokensHeader, "10")
			io.Copy(io.Discard, resp.Body) //nolint:errcheck
			resp.Body.Close()
		})
	}
	wg.Wait()
	queued := 0
	for range 3 {
		st := h.nextStats()
		if st.Queue > 0 {
			queued++
		}
		if st.TTFT != st.Queue+st.Prefill || st.Queue < 0 || st.Prefill <= 0 || st.Decode <= 0 {
			t.Errorf("inconsistent stats %+v", st)
		}
	}
	if queued < 2 {
		t.Errorf("%d of 3 requests waited with one slot, want at least 2", queued)
	}
}

// readUntilToken reads a stream until its first content token.
func readUntilToken(t *testing.T, r io.Reader) *bufio.Scanner {
	t.Helper()
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if strings.Contains(sc.Text(), `"content":" `) {
			return sc
		}
	}
	t.Fatalf("stream ended before a token: %v", sc.Err())
	return nil
}

func TestClientCancelFreesSlot(t *testing.T) {
	cfg := fastConfig()
	cfg.MaxRunning = 1
	h := start(t, cfg)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	long := h.request(ctx, "/v1/chat/completions", chatBody("go on forever", "stream", true), OutputTokensHeader, "100000000")
	readUntilToken(t, long.Body)
	cancel()
	long.Body.Close()

	// The only slot is taken until the engine notices the cancellation.
	var got chatResult
	h.postJSON("/v1/chat/completions", chatBody("next"), http.StatusOK, &got, OutputTokensHeader, "2")
	reasons := map[string]string{}
	for range 2 {
		st := h.nextStats()
		reasons[st.RequestID] = st.FinishReason
	}
	if len(reasons) != 2 || reasons[got.ID] != "stop" {
		t.Errorf("finish reasons %v, want the long one aborted and %s stopped", reasons, got.ID)
	}
	for id, r := range reasons {
		if id != got.ID && r != "abort" {
			t.Errorf("cancelled request %s finished with %q", id, r)
		}
	}
}

func TestShutdownFailsInFlight(t *testing.T) {
	h := start(t, fastConfig())
	resp := h.post("/v1/chat/completions", chatBody("long", "stream", true), OutputTokensHeader, "100000000")
	defer resp.Body.Close()
	sc := readUntilToken(t, resp.Body)

	h.stopEngine()
	var events []string
	for sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			events = append(events, data)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("stream after shutdown: %v", err)
	}
	last2 := events[max(0, len(events)-2):]
	if len(last2) != 2 || !strings.Contains(last2[0], `"object":"error"`) || !strings.Contains(last2[0], `"code":503`) || last2[1] != "[DONE]" {
		t.Errorf("stream ends with %q, want an error event then [DONE]", last2)
	}
	if st := h.nextStats(); st.FinishReason != "abort" {
		t.Errorf("stats %+v", st)
	}

	// The engine is gone: new requests are refused, not queued forever.
	var got errorBody
	h.postJSON("/v1/chat/completions", chatBody("late"), http.StatusServiceUnavailable, &got)
	h.srv.Close()
	goleak.VerifyNone(t)
}

func TestPrefixCacheOverHTTP(t *testing.T) {
	h := start(t, fastConfig())
	system := strings.Repeat("You are a careful assistant who answers briefly. ", 20)
	ask := func(question string) usage {
		body := map[string]any{"messages": []map[string]any{
			{"role": "system", "content": system},
			{"role": "user", "content": question},
		}}
		var got chatResult
		h.postJSON("/v1/chat/completions", body, http.StatusOK, &got, OutputTokensHeader, "2")
		st := h.nextStats()
		if st.CachedTokens != got.Usage.PromptTokensDetails.CachedTokens || st.PromptTokens != got.Usage.PromptTokens {
			t.Errorf("usage %+v disagrees with engine stats %+v", got.Usage, st)
		}
		return got.Usage
	}
	first := ask("What is a token?")
	again := ask("What is a token?")
	other := ask("What is a block?")

	if first.PromptTokensDetails.CachedTokens != 0 {
		t.Errorf("cold cache: %d cached tokens", first.PromptTokensDetails.CachedTokens)
	}
	for name, u := range map[string]usage{"identical": again, "same system prompt": other} {
		c := u.PromptTokensDetails.CachedTokens
		if c == 0 || c%16 != 0 || c >= u.PromptTokens {
			t.Errorf("%s: %d cached of %d prompt tokens; want a positive multiple of 16 below the prompt", name, c, u.PromptTokens)
		}
	}
	if again.PromptTokensDetails.CachedTokens < other.PromptTokensDetails.CachedTokens {
		t.Errorf("identical prompt cached %d, less than a shared prefix %d",
			again.PromptTokensDetails.CachedTokens, other.PromptTokensDetails.CachedTokens)
	}
	_, metrics := h.get("/metrics")
	if !strings.Contains(metrics, "vllm:prefix_cache_hits_total") || strings.Contains(metrics, `vllm:prefix_cache_hits_total{model_name="Qwen/Qwen3-8B"} 0`) {
		t.Errorf("prefix cache hits not counted")
	}
}

func TestRegistries(t *testing.T) {
	serve := func(t *testing.T, reg prometheus.Registerer) string {
		e, err := New(Config{}, nil, reg)
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(e.Handler())
		defer srv.Close()
		resp, err := srv.Client().Get(srv.URL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		return readAll(t, resp.Body)
	}
	t.Run("nil", func(t *testing.T) {
		if body := serve(t, nil); !strings.Contains(body, "vllm:num_requests_running") {
			t.Errorf("private registry not served")
		}
	})
	t.Run("caller's registry is served", func(t *testing.T) {
		reg := prometheus.NewRegistry()
		other := prometheus.NewCounter(prometheus.CounterOpts{Name: "demo_other_total"})
		reg.MustRegister(other)
		if body := serve(t, reg); !strings.Contains(body, "demo_other_total") || !strings.Contains(body, "vllm:e2e_request_latency_seconds") {
			t.Errorf("caller's registry not served")
		}
	})
	t.Run("registerer without gatherer", func(t *testing.T) {
		reg := prometheus.NewRegistry()
		wrapped := prometheus.WrapRegistererWith(prometheus.Labels{"upstream": "a"}, reg)
		if body := serve(t, wrapped); !strings.Contains(body, "vllm:num_requests_waiting") {
			t.Errorf("metrics not served")
		}
		if n, _ := reg.Gather(); len(n) == 0 {
			t.Errorf("metrics not registered with the caller's registerer")
		}
	})
	t.Run("twice on one registry", func(t *testing.T) {
		reg := prometheus.NewRegistry()
		if _, err := New(Config{}, nil, reg); err != nil {
			t.Fatal(err)
		}
		if _, err := New(Config{}, nil, reg); err == nil || !strings.Contains(err.Error(), "register") {
			t.Errorf("second engine on one registry: %v", err)
		}
	})
}

func TestRunTwice(t *testing.T) {
	e, err := New(Config{}, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := e.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.Run(ctx); err == nil {
		t.Error("second Run succeeded")
	}
}

func TestConfig(t *testing.T) {
	e, err := New(Config{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		Models: []string{"Qwen/Qwen3-8B"}, MaxRunning: 32,
		PrefillBase: 2e6, PrefillPerToken: 40e3, DecodeBase: 8e6, DecodePerSeq: 150e3,
		OutputMean: 120, OutputMax: 512, PrefixBlockTokens: 16, CacheBlocks: 8192,
		Faults: Faults{StallFor: 10e9}, Dialect: DialectVLLM,
	}
	if diff := cmp.Diff(want, e.cfg); diff != "" {
		t.Errorf("defaults (-want +got):\n%s", diff)
	}

	bad := []struct {
		name string
		cfg  Config
		want string
	}{
		{"empty model", Config{Models: []string{"a", ""}}, "Models[1]: empty model name"},
		{"duplicate model", Config{Models: []string{"a", "a"}}, `Models[1]: duplicate model "a"`},
		{"max running", Config{MaxRunning: -1}, "MaxRunning: must be positive, got -1"},
		{"output mean", Config{OutputMean: 600}, "OutputMean: 600 is above OutputMax 512"},
		{"output max", Config{OutputMax: -5}, "OutputMax: must be positive"},
		{"block size", Config{PrefixBlockTokens: -16}, "PrefixBlockTokens: must be positive"},
		{"cache blocks", Config{CacheBlocks: -1}, "CacheBlocks: must be positive"},
		{"prefill", Config{PrefillPerToken: -1}, "PrefillPerToken: must not be negative"},
		{"decode", Config{DecodeBase: -1}, "DecodeBase: must not be negative"},
		{"stall", Config{Faults: Faults{StallFor: -1}}, "Faults.StallFor: must not be negative"},
		{"rate", Config{Faults: Faults{ResetRate: 1.5}}, "Faults.ResetRate: must be within [0, 1], got 1.5"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.cfg, nil, nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New error %v, want one containing %q", err, tt.want)
			}
		})
	}
}
