package loadgen

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/sim"
)

// startSim serves a fast simulator on loopback and collects what the
// engine itself measured, in the order sequences finished.
func startSim(t *testing.T, cfg sim.Config) (url string, stats func() []sim.RequestStats) {
	t.Helper()
	var mu sync.Mutex
	var got []sim.RequestStats
	cfg.OnFinish = func(s sim.RequestStats) { mu.Lock(); got = append(got, s); mu.Unlock() }
	eng, err := sim.New(cfg, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = eng.Run(ctx); close(done) }()
	srv := httptest.NewServer(eng.Handler())
	t.Cleanup(func() { srv.CloseClientConnections(); srv.Close(); cancel(); <-done })
	return srv.URL + "/v1", func() []sim.RequestStats {
		mu.Lock()
		defer mu.Unlock()
		return append([]sim.RequestStats(nil), got...)
	}
}

func fastSim() sim.Config {
	return sim.Config{Seed: 1, PrefillBase: 200 * time.Microsecond, PrefillPerToken: time.Microsecond,
		DecodeBase: time.Millisecond, DecodePerSeq: 20 * time.Microsecond}
}

// TestAgainstSim: a closed-loop run against the simulator. The client's
// token totals equal the engine's own accounting exactly, ignore_eos gives
// exactly max_tokens, each content chunk is one token, and — one request
// at a time, so runs and engine stats pair up in order — the client's
// TTFT and E2E are never shorter than the engine's own (the client's
// clock starts before the engine's and stops after it).
func TestAgainstSim(t *testing.T) {
	url, stats := startSim(t, fastSim())
	w, err := NewSynthetic(Synthetic{Model: "Qwen/Qwen3-8B", Chat: true, InputLen: 64, OutputLen: 12, RangeRatio: 0.5, PrefixRatio: 0.5, IgnoreEOS: true, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	c := NewClient(url, nil, 1, time.Minute)
	defer c.CloseIdle()
	run, err := Drive(t.Context(), Load{Concurrency: 1, Requests: 12}, w, c.Send, nil)
	if err != nil {
		t.Fatal(err)
	}
	es := stats()
	if len(run.Results) != 12 || len(es) != 12 {
		t.Fatalf("%d results, %d engine stats, want 12", len(run.Results), len(es))
	}
	s := Summarize(run, url, false)
	var in, out int
	for i, r := range run.Results {
		e := es[i]
		if !r.OK() {
			t.Fatalf("request %d failed: %v", i, r.Err)
		}
		_, max := synthPrompt(t, w.Request(i))
		if r.OutputTokens != int(max) || r.ContentChunks != r.OutputTokens || r.OutputFrom != FromUsage || r.FinishReason != "length" {
			t.Errorf("request %d: %d tokens (%s), %d chunks, finish %q; max_tokens %g", i, r.OutputTokens, r.OutputFrom, r.ContentChunks, r.FinishReason, max)
		}
		if r.InputTokens != e.PromptTokens || r.OutputTokens != e.OutputTokens {
			t.Errorf("request %d: client %d/%d tokens, engine %d/%d", i, r.InputTokens, r.OutputTokens, e.PromptTokens, e.OutputTokens)
		}
		if r.TTFT < e.TTFT || r.E2E < e.E2E {
			t.Errorf("request %d: client TTFT %v E2E %v shorter than the engine's %v %v", i, r.TTFT, r.E2E, e.TTFT, e.E2E)
		}
		if len(r.ITL) != r.ContentChunks-1 {
			t.Errorf("request %d: %d gaps for %d chunks", i, len(r.ITL), r.ContentChunks)
		}
		in += e.PromptTokens
		out += e.OutputTokens
	}
	if s.Completed != 12 || s.TotalInputTokens != in || s.TotalOutputTokens != out {
		t.Errorf("summary %d completed, %d/%d tokens; engine %d/%d", s.Completed, s.TotalInputTokens, s.TotalOutputTokens, in, out)
	}
	if cached := es[len(es)-1].CachedTokens; cached == 0 {
		t.Error("the shared prefix was never a prefix-cache hit")
	}
}

// TestSimFailures: engine errors and cut streams are counted as failures
// by kind, and kept out of the latencies.
func TestSimFailures(t *testing.T) {
	url, _ := startSim(t, fastSim())
	c := NewClient(url, nil, 4, time.Minute)
	defer c.CloseIdle()
	w, _ := NewSynthetic(Synthetic{Model: "Qwen/Qwen3-8B", Chat: true, InputLen: 8, OutputLen: 6, IgnoreEOS: true})
	faults := []string{"none", "error=503", "reset-after=2", "malformed-after=1"}
	send := func(ctx context.Context, r *Request) Response {
		cc := *c
		cc.Header = map[string][]string{sim.FaultHeader: {faults[r.Index]}}
		return cc.Send(ctx, r)
	}
	run, err := Drive(t.Context(), Load{Concurrency: 2, Requests: 4}, w, send, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := Summarize(run, url, false)
	want := map[string]int{"status_503": 1, "truncated": 1, "stream_error": 1}
	if s.Completed != 1 || s.Failed != 3 || len(s.Errors) != len(want) {
		t.Fatalf("completed %d failed %d errors %v, want errors %v", s.Completed, s.Failed, s.Errors, want)
	}
	for k, n := range want {
		if s.Errors[k] != n {
			t.Errorf("errors %v, want %v", s.Errors, want)
		}
	}
	if s.TTFT.N != 1 {
		t.Errorf("%d TTFTs, want only the successful one", s.TTFT.N)
	}
}
