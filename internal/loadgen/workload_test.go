package loadgen

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestReadPrompts(t *testing.T) {
	in := `{"model":"a","messages":[{"role":"user","content":"hi"}],"stream":false,"max_tokens":5}

{"prompt":"once upon","max_tokens":3}
`
	w, err := ReadPrompts(strings.NewReader(in), "p.jsonl", "m")
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{PathChat, PathCompletions, PathChat} {
		r := w.Request(i)
		var body map[string]any
		if err := json.Unmarshal(r.Body, &body); err != nil {
			t.Fatal(err)
		}
		if r.Index != i || r.Path != want || body["model"] != "m" || body["stream"] != true ||
			body["stream_options"].(map[string]any)["include_usage"] != true {
			t.Errorf("request %d: path %s body %s", i, r.Path, r.Body)
		}
	}
	for _, tt := range []struct{ in, model, want string }{
		{`{"messages":[]}`, "", `p.jsonl:1: no "model" (set one per line or pass --model)`},
		{"\n{\"model\":\"a\"}", "", `p.jsonl:2: neither "messages" (chat) nor "prompt" (completions)`},
		{`[1]`, "m", `p.jsonl:1: not a JSON object`},
		{"\n\n", "m", `p.jsonl: no requests`},
	} {
		_, err := ReadPrompts(strings.NewReader(tt.in), "p.jsonl", tt.model)
		if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("%q: error %v, want %q", tt.in, err, tt.want)
		}
	}
}

func synthPrompt(t *testing.T, r *Request) (string, float64) {
	t.Helper()
	var body struct {
		Messages []struct{ Content string } `json:"messages"`
		Prompt   string                     `json:"prompt"`
		Max      float64                    `json:"max_tokens"`
	}
	if err := json.Unmarshal(r.Body, &body); err != nil {
		t.Fatal(err)
	}
	if len(body.Messages) > 0 {
		return body.Messages[0].Content, body.Max
	}
	return body.Prompt, body.Max
}

// TestSynthetic: lengths in range, the shared prefix shared, the rest not,
// and the same request for the same index whatever the order.
func TestSynthetic(t *testing.T) {
	w, err := NewSynthetic(Synthetic{Model: "m", Chat: true, InputLen: 100, OutputLen: 20, RangeRatio: 0.5, PrefixRatio: 0.4, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	var prompts []string
	for i := range 50 {
		p, max := synthPrompt(t, w.Request(i))
		n := len(strings.Fields(p))
		if n < 50 || n > 150 || max < 10 || max > 30 {
			t.Errorf("request %d: %d words, max_tokens %g", i, n, max)
		}
		prompts = append(prompts, p)
	}
	prefix := strings.Join(strings.Fields(prompts[0])[:40], " ")
	distinct := map[string]bool{}
	for i, p := range prompts {
		f := strings.Fields(p)
		if strings.Join(f[:40], " ") != prefix {
			t.Errorf("request %d does not start with the shared 40-word prefix", i)
		}
		distinct[strings.Join(f[40:min(len(f), 48)], " ")] = true
	}
	if len(distinct) < 45 {
		t.Errorf("only %d distinct suffixes in 50 requests", len(distinct))
	}
	if again, _ := synthPrompt(t, w.Request(7)); again != prompts[7] {
		t.Error("request 7 differs when asked again")
	}
	for _, tt := range []struct {
		s    Synthetic
		want string
	}{
		{Synthetic{InputLen: 1, OutputLen: 1}, "--model: required for synthetic requests"},
		{Synthetic{Model: "m", OutputLen: 1}, "--input-len: must be at least 1, got 0"},
		{Synthetic{Model: "m", InputLen: 1}, "--output-len: must be at least 1, got 0"},
		{Synthetic{Model: "m", InputLen: 1, OutputLen: 1, RangeRatio: 1}, "--range-ratio: must be in [0, 1), got 1"},
		{Synthetic{Model: "m", InputLen: 1, OutputLen: 1, PrefixRatio: 2}, "--prefix-ratio: must be in [0, 1], got 2"},
	} {
		if _, err := NewSynthetic(tt.s); err == nil || err.Error() != tt.want {
			t.Errorf("%+v: %v, want %q", tt.s, err, tt.want)
		}
	}
}
