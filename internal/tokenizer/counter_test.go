package tokenizer

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// chatBody turns a golden chat case into an OpenAI request body.
func chatBody(t *testing.T, c chatCase) []byte {
	t.Helper()
	body := map[string]any{"model": "m", "messages": c.Chat.Messages, "add_generation_prompt": c.Chat.AddGenerationPrompt}
	if c.Chat.Tools != nil {
		body["tools"] = c.Chat.Tools
	}
	if len(c.Chat.Kwargs) > 0 {
		body["chat_template_kwargs"] = c.Chat.Kwargs
	}
	raw, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func TestChatPromptTokensGolden(t *testing.T) {
	cases := readChatCases(t)
	for _, m := range []struct{ name, file string }{{"qwen3", "qwen3.chat.json"}, {"deepseek-v3", "deepseek_v3.chat.json"}} {
		c, err := Open(Spec{Tokenizer: m.name})
		if err != nil {
			t.Fatal(err)
		}
		var want []struct{ IDs []int }
		readJSON(t, m.file, &want)
		for i, cc := range cases {
			n, err := c.ChatPromptTokens(chatBody(t, cc))
			if err != nil {
				t.Errorf("%s %s: %v", m.name, cc.Name, err)
				continue
			}
			if n != len(want[i].IDs) {
				t.Errorf("%s %s: %d tokens, want %d", m.name, cc.Name, n, len(want[i].IDs))
			}
		}
	}
}

func TestChatPromptPreparation(t *testing.T) {
	c, err := Open(Spec{Tokenizer: "qwen3"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, body, want string
	}{
		{"text parts joined by newline",
			`{"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]}`,
			"<|im_start|>user\na\nb<|im_end|>\n<|im_start|>assistant\n"},
		{"add_generation_prompt false",
			`{"messages":[{"role":"user","content":"hi"}],"add_generation_prompt":false}`,
			"<|im_start|>user\nhi<|im_end|>\n"},
		{"string arguments parsed, key order kept",
			`{"messages":[{"role":"user","content":"x"},{"role":"assistant","content":null,"tool_calls":[{"type":"function","function":{"name":"f","arguments":"{\"b\":1,\"a\":[true,null,1.5]}"}}]}],"add_generation_prompt":false}`,
			"<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"b\": 1, \"a\": [true, null, 1.5]}}\n</tool_call><|im_end|>\n"},
	} {
		got, err := c.ChatPrompt([]byte(tc.body))
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if got != tc.want {
			t.Errorf("%s:\n got %q\nwant %q", tc.name, got, tc.want)
		}
	}
}

func TestChatPromptErrors(t *testing.T) {
	c, err := Open(Spec{Tokenizer: "qwen3"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, body, want string }{
		{"image", `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`,
			`chat request: message 0: message content is not text: part of type "image_url"`},
		{"no messages", `{"messages":[]}`, `chat request: no messages`},
		{"no role", `{"messages":[{"content":"x"}]}`, `chat request: message 0: no role`},
		{"not json", `{`, `chat request: unexpected end of JSON input`},
		{"continue", `{"messages":[{"role":"user","content":"x"}],"continue_final_message":true}`,
			`chat request: continue_final_message is not supported`},
		{"bad arguments", `{"messages":[{"role":"assistant","content":"","tool_calls":[{"function":{"name":"f","arguments":"{x"}}]}]}`,
			`chat request: message 0: tool call arguments: invalid character 'x'`},
	} {
		_, err := c.ChatPromptTokens([]byte(tc.body))
		if err == nil || err.Error() != tc.want {
			t.Errorf("%s: got %v\nwant %s", tc.name, err, tc.want)
		}
	}
	_, err = c.ChatPromptTokens([]byte(`{"messages":[{"role":"user","content":[{"type":"input_audio"}]}]}`))
	if !errors.Is(err, ErrNonText) {
		t.Errorf("audio: %v is not ErrNonText", err)
	}
	o, err := Open(Spec{Tokenizer: "o200k_base"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := o.ChatPromptTokens([]byte(`{"messages":[{"role":"user","content":"x"}]}`)); !errors.Is(err, ErrNoTemplate) {
		t.Errorf("o200k: %v", err)
	}
	if n := o.TextTokens("hello world"); n != 2 {
		t.Errorf("o200k TextTokens = %d", n)
	}
}

func TestSpec(t *testing.T) {
	for _, tc := range []struct {
		spec Spec
		want string
	}{
		{Spec{}, "tokenizer: required (a built-in name or a tokenizer.json path)"},
		{Spec{Tokenizer: "qwen9"}, `tokenizer: "qwen9" is neither a built-in (cl100k_base, deepseek-v3, o200k_base, qwen3) nor a path`},
		{Spec{Tokenizer: "qwen3", Template: "chatml"}, `chat_template: "chatml" is neither "none", a built-in nor a path`},
		{Spec{Tokenizer: "qwen3", Template: "none"}, ""},
		{Spec{Tokenizer: "/m/tokenizer.json", Template: "deepseek-v3"}, ""},
	} {
		err := tc.spec.Validate()
		if got := ""; err != nil {
			got = err.Error()
			if got != tc.want {
				t.Errorf("%+v: got %q, want %q", tc.spec, got, tc.want)
			}
		} else if tc.want != "" {
			t.Errorf("%+v: no error, want %q", tc.spec, tc.want)
		}
	}
}

func TestOpenFileSpec(t *testing.T) {
	dir := t.TempDir()
	tokPath := filepath.Join(dir, "tokenizer.json")
	os.WriteFile(tokPath, tinyJSON(t, nil), 0o644)
	// No tokenizer_config.json beside: no template.
	c, err := Open(Spec{Tokenizer: tokPath})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ChatPromptTokens([]byte(`{"messages":[{"role":"user","content":"hello"}]}`)); !errors.Is(err, ErrNoTemplate) {
		t.Errorf("without config: %v", err)
	}
	cfg := `{"bos_token":{"content":"<|x|>"},"chat_template":[{"name":"tool_use","template":"no"},{"name":"default","template":"{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}"}]}`
	os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(cfg), 0o644)
	c, err = Open(Spec{Tokenizer: tokPath})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := c.ChatPromptTokens([]byte(`{"messages":[{"role":"user","content":"hello"}]}`)); err != nil || n != 2 {
		t.Errorf("with config: %d, %v; want 2 (<|x|> hello)", n, err)
	}
	jinjaPath := filepath.Join(dir, "t.jinja")
	os.WriteFile(jinjaPath, []byte("{% for m in messages %}{{ m.role }}:{{ m.content }}{% endfor %}"), 0o644)
	c, err = Open(Spec{Tokenizer: tokPath, Template: jinjaPath})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := c.ChatPrompt([]byte(`{"messages":[{"role":"user","content":"hello"}]}`)); err != nil || got != "user:hello" {
		t.Errorf("jinja file: %q, %v", got, err)
	}
}

func TestRegistry(t *testing.T) {
	if _, err := NewRegistry(map[string]Spec{"bad": {}}); err == nil || err.Error() != `model "bad": tokenizer: required (a built-in name or a tokenizer.json path)` {
		t.Errorf("bad spec: %v", err)
	}
	r, err := NewRegistry(map[string]Spec{
		"Qwen/Qwen3-8B": {Tokenizer: "qwen3"},
		"broken":        {Tokenizer: "/nonexistent/tokenizer.json"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if c, ok, err := r.Counter("Qwen/Qwen3-8B"); !ok || err != nil || c.TextTokens("你好") != 1 {
		t.Errorf("qwen: %v %v", ok, err)
	}
	if _, ok, _ := r.Counter("gpt-9"); ok {
		t.Error("unknown model reported as configured")
	}
	if _, ok, err := r.Counter("broken"); !ok || err == nil {
		t.Errorf("broken: ok=%v err=%v", ok, err)
	}
	want := `model "broken": load tokenizer: open /nonexistent/tokenizer.json: no such file or directory`
	if err := r.Load(); err == nil || err.Error() != want {
		t.Errorf("Load: %v\nwant %s", err, want)
	}
}
