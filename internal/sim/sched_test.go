package sim

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// The scheduler's timing is tested inside synctest bubbles: the fake clock
// only advances when every goroutine waits, so step lengths come out exact
// and the assertions are equalities, not wall-clock bounds.

// schedConfig makes each cost easy to tell apart in the expected values.
func schedConfig() Config {
	return Config{
		MaxRunning:      4,
		PrefillBase:     1 * time.Millisecond,
		PrefillPerToken: 100 * time.Microsecond,
		DecodeBase:      2 * time.Millisecond,
		DecodePerSeq:    1 * time.Millisecond,
	}
}

// bubbleEngine runs an engine on the bubble's clock. run submits seqs, all
// before the scheduler starts so that they arrive at the same instant, and
// returns the stats in the order OnFinish reported them.
type bubbleEngine struct {
	e     *Engine
	mu    sync.Mutex
	stats []RequestStats
}

func newBubbleEngine(t *testing.T, cfg Config) *bubbleEngine {
	t.Helper()
	b := &bubbleEngine{}
	cfg.OnFinish = func(s RequestStats) {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.stats = append(b.stats, s)
	}
	e, err := New(cfg, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	b.e = e
	return b
}

// seqFor builds a sequence as the HTTP layer would. Prompts of fewer than
// PrefixBlockTokens tokens never hit the prefix cache; tag makes prompts
// differ.
func (b *bubbleEngine) seqFor(ctx context.Context, tag string, promptLen, target int) *seq {
	prompt := make([]uint32, promptLen)
	for i := range prompt {
		prompt[i] = tokenID(fmt.Sprint(tag, i))
	}
	return &seq{
		ctx: ctx, id: tag, model: defaultModel, prompt: prompt, target: target, reason: finishStop,
		arrival: time.Now(), notify: make(chan struct{}, 1), done: make(chan struct{}),
	}
}

// start runs the scheduler until the returned stop is called.
func (b *bubbleEngine) start(t *testing.T) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- b.e.Run(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
}

// submit queues seqs and waits until all have finished.
func (b *bubbleEngine) submit(t *testing.T, seqs ...*seq) {
	t.Helper()
	if err := b.e.submit(seqs...); err != nil {
		t.Fatal(err)
	}
	for _, s := range seqs {
		<-s.done
	}
}

// run submits seqs before the scheduler starts, so that they arrive at the
// same instant, and returns the stats in the order OnFinish reported them.
func (b *bubbleEngine) run(t *testing.T, seqs ...*seq) []RequestStats {
	t.Helper()
	if err := b.e.submit(seqs...); err != nil {
		t.Fatal(err)
	}
	stop := b.start(t)
	b.submit(t)
	for _, s := range seqs {
		<-s.done
	}
	stop()
	return b.reported()
}

func (b *bubbleEngine) reported() []RequestStats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]RequestStats(nil), b.stats...)
}

func gaugeValue(g prometheus.Gauge) float64 {
	var m dto.Metric
	if err := g.Write(&m); err != nil {
		panic(err)
	}
	return m.GetGauge().GetValue()
}

var ignoreIdentity = cmpopts.IgnoreFields(RequestStats{}, "RequestID", "Arrival", "Model", "TraceParent", "Stream")

func TestStepTimingSingle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBubbleEngine(t, schedConfig())
		got := b.run(t, b.seqFor(t.Context(), "a", 10, 5))
		// Prefill step: 1ms + 10×100µs, plus one decode of a batch of one (3ms).
		// Then 4 more decode steps of 3ms.
		want := []RequestStats{{
			Queue: 0, Prefill: 5 * time.Millisecond, Decode: 12 * time.Millisecond,
			TTFT: 5 * time.Millisecond, E2E: 17 * time.Millisecond,
			PromptTokens: 10, OutputTokens: 5, FinishReason: "stop",
		}}
		if diff := cmp.Diff(want, got, ignoreIdentity); diff != "" {
			t.Errorf("stats (-want +got):\n%s", diff)
		}
	})
}

func TestDecodeStepGrowsWithBatch(t *testing.T) {
	perToken := func(s RequestStats) time.Duration { return s.Decode / time.Duration(s.OutputTokens-1) }
	var alone, batched time.Duration
	synctest.Test(t, func(t *testing.T) {
		b := newBubbleEngine(t, schedConfig())
		alone = perToken(b.run(t, b.seqFor(t.Context(), "solo", 10, 11))[0])
	})
	synctest.Test(t, func(t *testing.T) {
		b := newBubbleEngine(t, schedConfig())
		var seqs []*seq
		for i := range 4 {
			seqs = append(seqs, b.seqFor(t.Context(), fmt.Sprint("s", i), 10, 11))
		}
		stats := b.run(t, seqs...)
		batched = perToken(stats[0])
		for _, s := range stats {
			// All four are prefilled in the same first step.
			if want := 4*2*time.Millisecond + 6*time.Millisecond; s.TTFT != want {
				t.Errorf("%s: TTFT %s, want %s", s.RequestID, s.TTFT, want)
			}
		}
	})
	if alone != 3*time.Millisecond || batched != 6*time.Millisecond {
		t.Errorf("decode step: alone %s, batch of 4 %s; want 3ms and 6ms", alone, batched)
	}
}

func TestQueueFIFO(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := schedConfig()
		cfg.MaxRunning = 1
		b := newBubbleEngine(t, cfg)
		got := b.run(t,
			b.seqFor(t.Context(), "a", 10, 3),
			b.seqFor(t.Context(), "b", 10, 3),
			b.seqFor(t.Context(), "c", 10, 3))
		var order []string
		for _, s := range got {
			order = append(order, s.RequestID)
		}
		if diff := cmp.Diff([]string{"a", "b", "c"}, order); diff != "" {
			t.Fatalf("finish order (-want +got):\n%s", diff)
		}
		// Each waits exactly for the previous one: one slot, FIFO.
		for i, s := range got {
			if s.TTFT != s.Queue+s.Prefill || s.E2E != s.TTFT+s.Decode {
				t.Errorf("%s: times do not add up: %+v", s.RequestID, s)
			}
			if i > 0 && s.Queue != got[i-1].E2E {
				t.Errorf("%s: queue %s, want the previous request's E2E %s", s.RequestID, s.Queue, got[i-1].E2E)
			}
		}
		if got[0].Queue != 0 || got[2].Queue != 2*got[0].E2E {
			t.Errorf("queues %s, %s, %s", got[0].Queue, got[1].Queue, got[2].Queue)
		}
	})
}

func TestPrefixCacheSkipsPrefill(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBubbleEngine(t, schedConfig())
		stop := b.start(t)
		defer stop()
		b.submit(t, b.seqFor(t.Context(), "p", 40, 2))
		b.submit(t, b.seqFor(t.Context(), "p", 40, 2))
		got := b.reported()
		first, second := got[0], got[1]
		// 40 tokens: the lookup covers the two full blocks before the last
		// token, so 32 are cached and 8 are prefilled.
		if first.CachedTokens != 0 || second.CachedTokens != 32 {
			t.Errorf("cached tokens %d then %d, want 0 then 32", first.CachedTokens, second.CachedTokens)
		}
		if saved := first.Prefill - second.Prefill; saved != 32*100*time.Microsecond {
			t.Errorf("prefill %s then %s, want 3.2ms saved", first.Prefill, second.Prefill)
		}
		// Nothing runs any more: the cached blocks are free, as in vLLM.
		if u := gaugeValue(b.e.metrics.kvUsage.WithLabelValues(defaultModel)); u != 0 {
			t.Errorf("kv cache usage %v when idle, want 0", u)
		}
	})
}

func TestKVCacheUsageWhileRunning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := schedConfig()
		cfg.CacheBlocks = 100
		var seen []float64
		b := newBubbleEngine(t, cfg)
		ctx, cancel := context.WithCancel(t.Context())
		s := b.seqFor(ctx, "long", 64, 1000)
		stop := b.start(t)
		defer stop()
		if err := b.e.submit(s); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			<-s.notify // a token: the sequence is running
			seen = append(seen, gaugeValue(b.e.metrics.kvUsage.WithLabelValues(defaultModel)))
		}
		cancel()
		<-s.done
		// 64 prompt tokens + 1 or 2 generated = 5 blocks of 16 out of 100.
		if diff := cmp.Diff([]float64{0.05, 0.05}, seen); diff != "" {
			t.Errorf("usage while running (-want +got):\n%s", diff)
		}
		if u := gaugeValue(b.e.metrics.kvUsage.WithLabelValues(defaultModel)); u != 0 {
			t.Errorf("usage after abort %v, want 0", u)
		}
	})
}

func TestCancelledWhileWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := schedConfig()
		cfg.MaxRunning = 1
		b := newBubbleEngine(t, cfg)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		got := b.run(t, b.seqFor(t.Context(), "run", 10, 3), b.seqFor(ctx, "gone", 10, 3))
		if len(got) != 2 || got[0].RequestID != "gone" || got[0].FinishReason != "abort" || got[0].OutputTokens != 0 {
			t.Errorf("stats %+v; want the cancelled sequence aborted before any token", got)
		}
		if got := b.e.metrics.waiting.WithLabelValues(defaultModel); gaugeValue(got) != 0 {
			t.Errorf("waiting gauge %v after the run, want 0", gaugeValue(got))
		}
	})
}
