package gateway

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/sim"
)

// TestEngineDialects: the simulator plays each engine's wire format, and
// for each engine × streamed or not × usage asked or not the Record's
// segments name their sources right, sum to E2E, and connect holds only
// network — never the engine's time (issue 18: a non-streamed answer's
// decode showed as connect, llama-server's timings were lost when the
// client did not ask for usage).
func TestEngineDialects(t *testing.T) {
	type engine struct {
		name, kind string // the gateway's engine kind
		cfg        sim.Config
		signal     string // the engine timing expected, "" for none
	}
	engines := []engine{
		{"vllm", "vllm", sim.Config{}, ""},
		{"vllm per-request metrics", "vllm", sim.Config{PerRequestMetrics: true}, "vllm-metrics"},
		{"llama-server", "llamacpp", sim.Config{Dialect: sim.DialectLlamaCpp}, "llamacpp-timings"},
		{"no usage", "vllm", sim.Config{Dialect: sim.DialectNoUsage}, ""},
	}
	for _, eng := range engines {
		for _, stream := range []bool{true, false} {
			for _, asked := range []bool{true, false} {
				if !stream && asked {
					continue // stream_options belongs to streams
				}
				name := fmt.Sprintf("%s/stream=%v/usage asked=%v", eng.name, stream, asked)
				t.Run(name, func(t *testing.T) {
					r := dialectRequest(t, eng.kind, eng.cfg, stream, asked)
					checkDialectRecord(t, r, eng.signal)
				})
			}
		}
	}
}

// dialectRequest sends one chat request through a gateway to a simulator
// speaking cfg's dialect and returns its Record.
func dialectRequest(t *testing.T, kind string, cfg sim.Config, stream, asked bool) *record.Record {
	t.Helper()
	// EOS: a generation that stops by itself ends on an end-of-sequence
	// token that the engine counts and the text never shows, as real
	// engines do; tollgate's own count must add it back.
	cfg.Seed, cfg.DecodeBase, cfg.PrefillBase, cfg.EOS = 1, 2*time.Millisecond, 5*time.Millisecond, true
	e, err := sim.New(cfg, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = e.Run(ctx); close(done) }()
	srv := httptest.NewServer(e.Handler())
	t.Cleanup(func() { srv.Close(); cancel(); <-done })
	gcfg := testConfig(srv.URL + "/v1")
	gcfg.Upstreams[0].Engine = kind
	gcfg.Upstreams[0].Models = []string{"Qwen/Qwen3-8B"}
	tg := newTestGateway(t, gcfg)
	body := `{"model":"Qwen/Qwen3-8B","max_tokens":40,"messages":[{"role":"user","content":"tell me a story about a gateway"}]`
	if stream {
		body += `,"stream":true`
		if asked {
			body += `,"stream_options":{"include_usage":true}`
		}
	}
	resp := post(t, tg.URL+"/v1/chat/completions", body+"}", map[string]string{sim.OutputTokensHeader: "20"})
	b := readAll(t, resp)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	if stream {
		// What the client receives is what it asked for: the usage chunk
		// only when asked (and the engine sends one).
		if got := bytes.Contains(b, []byte(`"usage":{`)); got != (asked && cfg.Dialect != sim.DialectNoUsage) {
			t.Errorf("usage chunk relayed: %v, asked %v:\n%s", got, asked, b)
		}
	}
	r := tg.next(t)
	// Without usage and without a tokenizer, a stream is counted by its
	// chunks (19 shown, plus the end token); a whole answer cannot be
	// counted at all.
	if (stream || cfg.Dialect != sim.DialectNoUsage) && r.Usage.OutputTokens != 20 {
		t.Errorf("output tokens %d (%s), want 20", r.Usage.OutputTokens, r.Usage.Source)
	}
	return r
}

func checkDialectRecord(t *testing.T, r *record.Record, signal string) {
	t.Helper()
	s := r.Derived.Segments
	if s.Sum() != r.Derived.E2E {
		t.Errorf("segments sum to %v, E2E %v", s.Sum(), r.Derived.E2E)
	}
	got := ""
	if r.EngineTiming != nil {
		got = r.EngineTiming.Signal
	}
	if got != signal {
		t.Fatalf("engine timing %q, want %q", got, signal)
	}
	src := s.Source
	// Connect is the gateway's own connection wait, plus — only where the
	// engine's figures say how long it worked — the network left over.
	w2 := r.Marks.FirstUpstreamToken - r.Marks.UpstreamSent
	switch src[record.SegConnect] {
	case "gateway", "":
		if s.Connect > r.ConnectWait {
			t.Errorf("connect %v > the connection wait %v", s.Connect, r.ConnectWait)
		}
	default:
		if signal == "" || !strings.HasPrefix(src[record.SegConnect], "gateway+inferred:network") {
			t.Errorf("connect source %q", src[record.SegConnect])
		}
	}
	engineTime := s.EngineQueue + s.Prefill
	if !r.Stream {
		engineTime += s.Decode
		if src[record.SegUnattributed] == record.UpstreamNotSplit {
			engineTime += s.Unattributed
		}
	}
	if s.Connect+engineTime != w2 {
		t.Errorf("connect %v + engine %v ≠ the wait for the first byte %v", s.Connect, engineTime, w2)
	}
	switch {
	case signal != "":
		want := "engine:" + signal
		if src[record.SegPrefill] != want || src[record.SegDecode] != want {
			t.Errorf("prefill from %q, decode from %q; want %q", src[record.SegPrefill], src[record.SegDecode], want)
		}
		if !r.Stream && s.Decode != min(r.EngineTiming.Decode, w2) {
			t.Errorf("decode %v, the engine's %v", s.Decode, r.EngineTiming.Decode)
		}
		if !r.Stream && r.Derived.TPOT == nil {
			t.Error("no TPOT for a non-streamed answer with the engine's decode time")
		}
	case !r.Stream:
		if src[record.SegUnattributed] != record.UpstreamNotSplit || s.Prefill != 0 || s.Decode != 0 {
			t.Errorf("non-streamed without engine timings: %+v from %v", s, src)
		}
	default:
		if !strings.HasPrefix(src[record.SegPrefill], "inferred:upstream TTFT") || src[record.SegDecode] != "gateway" {
			t.Errorf("streamed without engine timings: sources %v", src)
		}
	}
}
