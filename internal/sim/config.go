package sim

import (
	"errors"
	"fmt"
	"net/url"
	"time"
)

// Config describes the simulated engine. Zero values mean "use the default";
// negative values are errors.
type Config struct {
	// Models are the served model names; requests for another model get a
	// 404 as from vLLM. Default ["Qwen/Qwen3-8B"].
	Models []string
	// Seed makes the engine deterministic: the same seed and the same
	// sequence of requests give the same outputs.
	Seed int64
	// MaxRunning is the number of continuous-batching slots (default 32);
	// other sequences wait in a FIFO queue.
	MaxRunning int
	// Prefill of one sequence costs PrefillBase + PrefillPerToken × uncached
	// prompt tokens (defaults 2ms, 40µs).
	PrefillBase, PrefillPerToken time.Duration
	// One decode step costs DecodeBase + DecodePerSeq × running sequences
	// (defaults 8ms, 150µs).
	DecodeBase, DecodePerSeq time.Duration
	// OutputMean and OutputMax shape the output length when the request does
	// not pin it (defaults 120, 512).
	OutputMean, OutputMax int
	// PrefixBlockTokens is the prefix-cache block size (default 16).
	PrefixBlockTokens int
	// CacheBlocks is the KV cache capacity in blocks (default 8192).
	CacheBlocks int
	Faults      Faults
	// OTLPEndpoint, when set, makes the engine emit vLLM's per-request
	// span ("llm_request", see otlp.go) for every sequence that leaves
	// it, over OTLP/HTTP protobuf, as vLLM started with
	// --otlp-traces-endpoint does. It is a base URL such as
	// http://127.0.0.1:4318; spans go to its /v1/traces (a URL already
	// ending in /v1/traces is used as is). Empty: no spans.
	OTLPEndpoint string
	// PerRequestMetrics adds vLLM's per-request "metrics" object to
	// responses, as vLLM's --enable-per-request-metrics does: at the top
	// level of a non-streamed response, and on the final usage chunk of a
	// stream (so only with stream_options.include_usage). As in vLLM, only
	// single-sequence requests get it.
	PerRequestMetrics bool
	// NoUsage plays an engine that never reports usage on chat and
	// completions — no usage chunk even when stream_options.include_usage
	// asks for one, no usage object in a whole response — as some engines
	// and proxies in front of them do. The gateway must then count tokens
	// itself.
	NoUsage bool
	// OnFinish, if set, is called once per sequence that leaves the engine
	// (after its span, if any, is queued), from the scheduler goroutine, so it
	// must not block. It runs before the response ends, so a client that has
	// read a whole response can expect its stats to be reported. A
	// completions request with several prompts reports one sequence per
	// prompt, with ids <id>-0, <id>-1… as vLLM does. Sequences cancelled by
	// the client or by shutdown report FinishReason "abort".
	OnFinish func(RequestStats)
}

// Faults are per-request probabilities of injected failures, drawn from the
// seeded source. A request's X-Sim-Fault header replaces them.
type Faults struct {
	ErrorRate     float64 // HTTP 500 before any byte
	ResetRate     float64 // connection aborted at a random token
	StallRate     float64 // stream paused for StallFor at a random token
	MalformedRate float64 // a broken SSE event at a random token
	// StallFor is how long a stall lasts (default 10s).
	StallFor time.Duration
}

// RequestStats is what the engine knows about one sequence when it ends; the
// durations follow vLLM's request span (gen_ai.latency.*).
type RequestStats struct {
	RequestID, TraceParent, Model string
	Arrival                       time.Time
	Queue                         time.Duration // arrival → scheduled
	Prefill                       time.Duration // scheduled → first token
	Decode                        time.Duration // first → last token
	TTFT                          time.Duration // arrival → first token
	E2E                           time.Duration // arrival → finished
	PromptTokens, CachedTokens    int
	OutputTokens                  int
	FinishReason                  string // stop | length | abort
	Stream                        bool
}

const (
	defaultModel      = "Qwen/Qwen3-8B"
	defaultStallFor   = 10 * time.Second
	defaultMaxRunning = 32
)

// withDefaults returns a copy of cfg with zero fields set to their defaults.
func (cfg Config) withDefaults() Config {
	if len(cfg.Models) == 0 {
		cfg.Models = []string{defaultModel}
	} else {
		cfg.Models = append([]string(nil), cfg.Models...)
	}
	setInt(&cfg.MaxRunning, defaultMaxRunning)
	setDur(&cfg.PrefillBase, 2*time.Millisecond)
	setDur(&cfg.PrefillPerToken, 40*time.Microsecond)
	setDur(&cfg.DecodeBase, 8*time.Millisecond)
	setDur(&cfg.DecodePerSeq, 150*time.Microsecond)
	setInt(&cfg.OutputMean, 120)
	setInt(&cfg.OutputMax, 512)
	setInt(&cfg.PrefixBlockTokens, 16)
	setInt(&cfg.CacheBlocks, 8192)
	setDur(&cfg.Faults.StallFor, defaultStallFor)
	return cfg
}

func setInt(p *int, def int) {
	if *p == 0 {
		*p = def
	}
}

func setDur(p *time.Duration, def time.Duration) {
	if *p == 0 {
		*p = def
	}
}

// validate checks a config that already has its defaults; every error names
// the field so that a CLI flag or YAML key can be traced back.
func (cfg Config) validate() error {
	var errs []error
	seen := map[string]bool{}
	for i, m := range cfg.Models {
		switch {
		case m == "":
			errs = append(errs, fmt.Errorf("Models[%d]: empty model name", i))
		case seen[m]:
			errs = append(errs, fmt.Errorf("Models[%d]: duplicate model %q", i, m))
		}
		seen[m] = true
	}
	positive := []struct {
		name string
		v    int
	}{
		{"MaxRunning", cfg.MaxRunning},
		{"OutputMean", cfg.OutputMean},
		{"OutputMax", cfg.OutputMax},
		{"PrefixBlockTokens", cfg.PrefixBlockTokens},
		{"CacheBlocks", cfg.CacheBlocks},
	}
	for _, f := range positive {
		if f.v < 0 {
			errs = append(errs, fmt.Errorf("%s: must be positive, got %d", f.name, f.v))
		}
	}
	if cfg.OutputMax > 0 && cfg.OutputMean > cfg.OutputMax {
		errs = append(errs, fmt.Errorf("OutputMean: %d is above OutputMax %d", cfg.OutputMean, cfg.OutputMax))
	}
	durations := []struct {
		name string
		v    time.Duration
	}{
		{"PrefillBase", cfg.PrefillBase},
		{"PrefillPerToken", cfg.PrefillPerToken},
		{"DecodeBase", cfg.DecodeBase},
		{"DecodePerSeq", cfg.DecodePerSeq},
		{"Faults.StallFor", cfg.Faults.StallFor},
	}
	for _, f := range durations {
		if f.v < 0 {
			errs = append(errs, fmt.Errorf("%s: must not be negative, got %s", f.name, f.v))
		}
	}
	rates := []struct {
		name string
		v    float64
	}{
		{"Faults.ErrorRate", cfg.Faults.ErrorRate},
		{"Faults.ResetRate", cfg.Faults.ResetRate},
		{"Faults.StallRate", cfg.Faults.StallRate},
		{"Faults.MalformedRate", cfg.Faults.MalformedRate},
	}
	for _, f := range rates {
		// The negated form also rejects NaN.
		if !(f.v >= 0 && f.v <= 1) {
			errs = append(errs, fmt.Errorf("%s: must be within [0, 1], got %v", f.name, f.v))
		}
	}
	if cfg.OTLPEndpoint != "" {
		if u, err := url.Parse(cfg.OTLPEndpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("OTLPEndpoint: want an http(s) URL such as http://127.0.0.1:4318, got %q", cfg.OTLPEndpoint))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("sim config: %w", err)
	}
	return nil
}
