package gateway

import (
	"bufio"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/sim"
	"github.com/tollgate-dev/tollgate/internal/store"
	"github.com/tollgate-dev/tollgate/internal/tokenizer"
)

// TestCutStreamCountedByTokenizer: a stream cut off mid-way (the engine
// never sends usage) is recorded with output tokens counted by the served
// model's own tokenizer, equal to the tokens actually streamed, and input
// tokens counted with its chat template.
func TestCutStreamCountedByTokenizer(t *testing.T) {
	se := startSim(t, sim.Config{})
	tg := simGateway(t, se)
	tg.waitCounter(t, simModel)
	const body = `{"model":"` + simModel + `","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Tell me about water."}],"stream":true}`
	resp := post(t, tg.URL+"/v1/chat/completions", body, map[string]string{sim.FaultHeader: "reset-after=17", sim.OutputTokensHeader: "40"})
	var streamed strings.Builder
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if line, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			var st streamText
			st.add([]byte(line))
			streamed.Write(st.b)
		}
	}
	resp.Body.Close()
	r := tg.next(t)

	qwen := qwen3(t)
	wantOut := int64(qwen.TextTokens(streamed.String()))
	wantIn, err := qwen.ChatPromptTokens([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if r.Usage.Source != record.SourceTokenizer || r.Usage.OutputTokens != wantOut || r.Usage.OutputTokens != 17 || r.Usage.InputTokens != int64(wantIn) {
		t.Errorf("usage = %+v; want source tokenizer, %d output tokens (what was streamed: %q), %d input tokens", r.Usage, wantOut, streamed.String(), wantIn)
	}
	if r.ErrorType != record.ErrUpstreamReset {
		t.Errorf("error type %q", r.ErrorType)
	}
}

// qwen3 is the simulated model's tokenizer (simGateway's).
func qwen3(t *testing.T) *tokenizer.Counter {
	t.Helper()
	c, err := tokenizer.Open(tokenizer.Spec{Tokenizer: "qwen3"})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestResponsesAsChat: a Responses request is counted as the chat request
// the engine renders: instructions, messages and their text parts,
// function calls and their outputs, function tools.
func TestResponsesAsChat(t *testing.T) {
	body := `{"model":"m","instructions":"Be brief.","tools":[{"type":"function","name":"get_weather","parameters":{"type":"object"}},{"type":"web_search"}],
		"input":[{"role":"user","content":[{"type":"input_text","text":"Weather in Paris?"},{"type":"input_image","image_url":"x"}]},
		{"type":"function_call","name":"get_weather","arguments":"{\"city\":\"Paris\"}","call_id":"c1"},
		{"type":"function_call_output","call_id":"c1","output":"18C"},{"type":"reasoning","summary":[]}]}`
	got, err := responsesAsChat([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":[{"type":"text","text":"Weather in Paris?"}]},` +
		`{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},` +
		`{"role":"tool","content":"18C","tool_call_id":"c1"}],` +
		`"tools":[{"function":{"description":"","name":"get_weather","parameters":{"type":"object"}},"type":"function"}]}`
	if string(got) != want {
		t.Errorf("responsesAsChat =\n%s\nwant\n%s", got, want)
	}
	if n, err := qwen3(t).ChatPromptTokens(got); err != nil || n < 20 {
		t.Errorf("the chat template counts %d tokens (%v), want the whole conversation", n, err)
	}
	if _, err := responsesAsChat([]byte(`{"input":42}`)); err == nil {
		t.Error("an input that is neither a string nor items was accepted")
	}
}

// TestTokenizerMismatchSignal: the simulator counts prompts with its own
// toy tokenizer, so a sampled check against Qwen3's count must raise the
// mismatch signal (metric and event).
func TestTokenizerMismatchSignal(t *testing.T) {
	se := startSim(t, sim.Config{})
	cfg := testConfig(se.URL)
	cfg.Upstreams[0].Models = []string{simModel}
	cfg.Sampling.TokenizerCheck = 1
	tg := newTestGateway(t, cfg)
	tg.waitCounter(t, simModel)
	// The simulator counts each punctuation mark as a token; Qwen3 merges
	// a run of them into a few: far beyond the tolerance.
	readAll(t, post(t, tg.URL+"/v1/chat/completions", `{"model":"`+simModel+`","messages":[{"role":"user","content":"Wow`+strings.Repeat("!", 60)+`"}]}`, nil))
	r := tg.next(t)
	var ev store.Event
	select {
	case ev = <-tg.Events:
	case <-time.After(10 * time.Second):
		t.Fatal("no tokenizer_mismatch event within 10s")
	}
	if ev.Kind != "tokenizer_mismatch" || !strings.Contains(ev.Message, r.RequestID) || !strings.Contains(ev.Data, `"model":"`+simModel+`"`) {
		t.Errorf("event = %+v", ev)
	}
	if got := metricValue(t, tg, "tollgate_tokenizer_mismatch_total", map[string]string{"model": simModel}); got != 1 {
		t.Errorf("mismatch metric = %v, want 1", got)
	}
}

// TestCountersAwait: a finishing request waits for a tokenizer still
// loading until it has loaded, and at most the patience; a model with no
// tokenizer never waits. (The clock is synctest's: no real waiting.)
func TestCountersAwait(t *testing.T) {
	o200k, err := tokenizer.Open(tokenizer.Spec{Tokenizer: "o200k_base"})
	if err != nil {
		t.Fatal(err)
	}
	synctest.Test(t, func(t *testing.T) {
		release := map[string]chan struct{}{"slow": make(chan struct{}), "stuck": make(chan struct{})}
		const patience = 5 * time.Second
		c := newCounters(map[string]tokenizer.Spec{"slow": {Tokenizer: "a.json"}, "stuck": {Tokenizer: "b.json"}}, patience, discardLog())
		c.open = func(s tokenizer.Spec) (*tokenizer.Counter, error) {
			<-release[map[string]string{"a.json": "slow", "b.json": "stuck"}[s.Tokenizer]]
			return o200k, nil
		}
		c.preload()
		if loading, _ := c.unready(); len(loading) != 2 {
			t.Errorf("unready = %q, want both configured models", loading)
		}

		start := time.Now()
		go func() {
			time.Sleep(time.Second)
			close(release["slow"])
		}()
		if ct := c.await("slow"); ct != o200k || time.Since(start) != time.Second {
			t.Errorf("slow: await = %p after %s, want the counter after 1s, when it loaded", ct, time.Since(start))
		}

		start = time.Now()
		if ct := c.await("stuck"); ct != nil || time.Since(start) != patience {
			t.Errorf("stuck: await = %p after %s, want nil after %s", ct, time.Since(start), patience)
		}
		if loading, _ := c.unready(); len(loading) != 1 || !strings.HasPrefix(loading[0], "stuck ") {
			t.Errorf("unready = %q, want the stuck model only", loading)
		}

		start = time.Now()
		if ct := c.await("no-such-family"); ct != nil || time.Since(start) != 0 {
			t.Errorf("a model without a tokenizer: await = %p after %s, want nil at once", ct, time.Since(start))
		}
		close(release["stuck"])
		c.wait()
	})
}

func TestSpecFor(t *testing.T) {
	cases := map[string]string{
		"Qwen/Qwen3-8B": "qwen3", "qwen3-235b-a22b": "qwen3", "deepseek-ai/DeepSeek-V3": "deepseek-v3",
		"deepseek-reasoner": "deepseek-v3", "gpt-4o-mini": "o200k_base", "o3-mini": "o200k_base", "gpt-4-turbo": "cl100k_base",
		"llama-3-8b": "", "my-model": "",
	}
	for model, want := range cases {
		s, ok := SpecFor(model, nil)
		if got := s.Tokenizer; got != want || ok != (want != "") {
			t.Errorf("SpecFor(%q) = %q %v, want %q", model, got, ok, want)
		}
	}
	if s, _ := SpecFor("Qwen/Qwen3-8B", map[string]tokenizer.Spec{"Qwen/Qwen3-8B": {Tokenizer: "deepseek-v3"}}); s.Tokenizer != "deepseek-v3" {
		t.Errorf("configured spec did not win: %v", s)
	}
}

// TestEndToken: an output count tollgate made itself gets the token that
// ended a natural stop, for the engines known to count it — and only on
// a stop, never on length, a cut stream or a hosted API.
func TestEndToken(t *testing.T) {
	for _, tc := range []struct {
		engine, finish string
		want           int64
	}{
		{"vllm", "stop", 11}, {"sglang", "stop", 11}, {"llamacpp", "stop", 11}, {"ollama", "stop", 11},
		{"tgi", "eos_token", 11}, {"vllm", "length", 10}, {"vllm", "", 10}, {"vllm", "tool_calls", 10},
		{"openai", "stop", 10},
	} {
		r := &record.Record{Engine: tc.engine, FinishReason: tc.finish, Usage: record.Usage{OutputTokens: 10}}
		endToken(r)
		if r.Usage.OutputTokens != tc.want {
			t.Errorf("%s %q: %d, want %d", tc.engine, tc.finish, r.Usage.OutputTokens, tc.want)
		}
	}
}
