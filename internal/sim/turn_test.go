package sim

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestTurnPlan(t *testing.T) {
	max := func(n int) *int { return &n }
	tests := []struct {
		name       string
		spec       turnSpec
		want       int
		wantKinds  string // one letter per token: r reasoning, t text, a args, h hidden
		wantReason string
	}{
		{"text", turnSpec{}, 3, "ttt", finishStop},
		{"eos", turnSpec{eos: true}, 3, "tth", finishStop},
		{"eos alone", turnSpec{eos: true}, 1, "h", finishStop},
		{"reasoning share", turnSpec{reasoning: true, share: 0.5}, 4, "rrtt", finishStop},
		{"reasoning pinned", turnSpec{reasoning: true, share: 0.5, pinned: 5}, 4, "rrrrrt", finishStop},
		{"reasoning budget", turnSpec{reasoning: true, share: 0.9, budget: 2}, 10, "rrtttttttt", finishStop},
		{"tool", turnSpec{tool: "f", argKey: "k"}, 5, "aaaaa", finishStop},
		{"tool minimum", turnSpec{tool: "f", argKey: "k", eos: true}, 1, "aaah", finishStop},
		{"cut", turnSpec{maxTokens: max(2)}, 5, "tt", finishLength},
		{"cut drops eos", turnSpec{eos: true, maxTokens: max(3)}, 4, "ttt", finishLength},
		{"ends at the limit", turnSpec{eos: true, maxTokens: max(3)}, 3, "tth", finishStop},
		{"stop sequence", turnSpec{stops: []string{" "}, eos: true}, 5, "h", finishStopSequence},
		{"stop sequence past the cut", turnSpec{stops: []string{" "}, reasoning: true, pinned: 2, maxTokens: max(2)}, 5, "rr", finishLength},
	}
	letter := map[pieceKind]byte{pieceReasoning: 'r', pieceText: 't', pieceArgs: 'a', pieceHidden: 'h'}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.spec.plan(tt.want, seededRand(1, "m", 1, nil))
			var b strings.Builder
			for _, p := range got.script {
				b.WriteByte(letter[p.kind])
			}
			if b.String() != tt.wantKinds || got.reason != tt.wantReason {
				t.Errorf("plan = %s %s, want %s %s", b.String(), got.reason, tt.wantKinds, tt.wantReason)
			}
			if tt.spec.tool != "" && got.reason != finishLength {
				var args map[string]string
				if err := json.Unmarshal([]byte(got.answer(pieceArgs)), &args); err != nil || args[tt.spec.argKey] == "" {
					t.Errorf("arguments %q: %v", got.answer(pieceArgs), err)
				}
			}
		})
	}
}

// A turn pinned to "forever" is planned up to its cut, or up to
// maxTurnTokens, never to its wanted length.
func TestTurnPlanBounded(t *testing.T) {
	limit := 5
	for _, sp := range []turnSpec{{maxTokens: &limit}, {reasoning: true, pinned: 1e8, maxTokens: &limit}, {tool: "f", maxTokens: &limit}} {
		if got := sp.plan(1e8, seededRand(1, "m", 1, nil)); len(got.script) != limit || got.reason != finishLength {
			t.Errorf("%+v: %d tokens, %s", sp, len(got.script), got.reason)
		}
	}
	if got := (turnSpec{}).plan(1e8, seededRand(1, "m", 1, nil)); len(got.script) != maxTurnTokens {
		t.Errorf("unbounded turn: %d tokens", len(got.script))
	}
}

func TestPromptCacheExpiry(t *testing.T) {
	c := newPromptCache()
	now := time.Unix(1000, 0)
	req := func() *cacheReq {
		return &cacheReq{bounds: []cacheBound{{pos: 1500, hash: 1, ttl: 5 * time.Minute}, {pos: 1600, hash: 2}, {pos: 2000, hash: 3, ttl: time.Hour}}}
	}
	r := req()
	c.lookup(r, now)
	if r.read != 0 || r.write5m != 1500 || r.write1h != 500 {
		t.Fatalf("cold: %+v", r)
	}
	c.store(r, now)
	r = req()
	c.lookup(r, now.Add(4*time.Minute))
	if r.read != 2000 || r.write5m+r.write1h != 0 {
		t.Errorf("warm: %+v", r)
	}
	// The 5m entry was not refreshed by that read (the 1h one was hit), so
	// after 6 minutes only the 1h entry is left.
	r = &cacheReq{bounds: []cacheBound{{pos: 1500, hash: 1, ttl: 5 * time.Minute}}}
	c.lookup(r, now.Add(6*time.Minute))
	if r.read != 0 || r.write5m != 1500 {
		t.Errorf("5m entry after 6 minutes: %+v", r)
	}
	r = req()
	c.lookup(r, now.Add(2*time.Hour))
	if r.read != 0 {
		t.Errorf("1h entry after 2 hours: %+v", r)
	}
	for i := range promptCacheEntries + 5 {
		c.store(&cacheReq{bounds: []cacheBound{{pos: 2000, hash: uint64(100 + i), ttl: time.Hour}}}, now.Add(3*time.Hour))
	}
	if len(c.entries) > promptCacheEntries {
		t.Errorf("%d entries, bound %d", len(c.entries), promptCacheEntries)
	}
}

// answer returns the text of the turn's pieces of one kind.
func (t turn) answer(kind pieceKind) string {
	var b strings.Builder
	for _, p := range t.script {
		if p.kind == kind {
			b.WriteString(p.text)
		}
	}
	return b.String()
}

// FuzzAgentRequests feeds arbitrary bodies to the parsers of the agent
// APIs: they may refuse them, never panic, and a prompt they accept adds
// up.
func FuzzAgentRequests(f *testing.F) {
	f.Add([]byte(`{"input":"hi","tools":[{"type":"function","name":"f"}]}`))
	f.Add([]byte(`{"input":[{"role":"user","content":[{"type":"input_text","text":"x"}]},{"type":"function_call_output","call_id":"c","output":[{"type":"input_text","text":"y"}]}]}`))
	f.Add([]byte(`{"max_tokens":5,"system":[{"type":"text","text":"s","cache_control":{"type":"ephemeral","ttl":"1h"}}],"messages":[{"role":"user","content":[{"type":"tool_result","content":[{"type":"text","text":"r"}]}]}]}`))
	f.Add([]byte(`{"input":[null,{"type":"message"}],"messages":[{"role":"user","content":null}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var rr responsesRequest
		if json.Unmarshal(body, &rr) == nil {
			if items, err := responseInput(rr.Input, false); err == nil {
				for _, it := range items {
					itemTexts(it)
				}
			}
			if tools, err := responseTools(rr.Tools); err == nil {
				responseToolChoice(rr.ToolChoice, tools) //nolint:errcheck
			}
		}
		var mr messagesRequest
		if json.Unmarshal(body, &mr) == nil {
			p, err := buildMessagesPrompt("m", &mr)
			if err != nil {
				return
			}
			if p.cache != nil {
				newPromptCache().lookup(p.cache, time.Now())
				c := p.cache
				if c.read+c.write5m+c.write1h > len(p.ids) {
					t.Errorf("cache counts %+v exceed the %d-token prompt", c, len(p.ids))
				}
			}
		}
	})
}
