package tokenizer

import (
	"encoding/json"
	"slices"
	"testing"
)

// chatCase is one entry of testdata/golden/chat_cases.json; fields other
// than these are template kwargs (enable_thinking).
type chatCase struct {
	Name     string
	Chat     Chat
	Messages []json.RawMessage
}

func readChatCases(t *testing.T) []chatCase {
	t.Helper()
	var raw []map[string]json.RawMessage
	readJSON(t, "chat_cases.json", &raw)
	var cases []chatCase
	for _, fields := range raw {
		var c chatCase
		c.Chat.Kwargs = map[string]json.RawMessage{}
		for k, v := range fields {
			var err error
			switch k {
			case "name":
				err = json.Unmarshal(v, &c.Name)
			case "messages":
				err = json.Unmarshal(v, &c.Chat.Messages)
			case "tools":
				err = json.Unmarshal(v, &c.Chat.Tools)
			case "add_generation_prompt":
				err = json.Unmarshal(v, &c.Chat.AddGenerationPrompt)
			default:
				c.Chat.Kwargs[k] = v
			}
			if err != nil {
				t.Fatalf("chat_cases.json %s: %v", k, err)
			}
		}
		cases = append(cases, c)
	}
	return cases
}

func TestGoldenChat(t *testing.T) {
	cases := readChatCases(t)
	for _, model := range []struct{ name, file string }{
		{"qwen3", "qwen3.chat.json"},
		{"deepseek-v3", "deepseek_v3.chat.json"},
	} {
		t.Run(model.name, func(t *testing.T) {
			tok, err := Builtin(model.name)
			if err != nil {
				t.Fatal(err)
			}
			tmpl, err := BuiltinTemplate(model.name)
			if err != nil {
				t.Fatal(err)
			}
			var want []struct {
				Name string
				Text string
				IDs  []int
			}
			readJSON(t, model.file, &want)
			if len(want) != len(cases) {
				t.Fatalf("%s has %d cases, chat_cases.json %d", model.file, len(want), len(cases))
			}
			for i, c := range cases {
				if want[i].Name != c.Name {
					t.Fatalf("case %d: %s vs %s", i, want[i].Name, c.Name)
				}
				text, err := tmpl.Render(c.Chat)
				if err != nil {
					t.Errorf("%s: %v", c.Name, err)
					continue
				}
				if text != want[i].Text {
					t.Errorf("%s: text\n got %q\nwant %q", c.Name, text, want[i].Text)
					continue
				}
				if ids := tok.Encode(text); !slices.Equal(ids, want[i].IDs) {
					t.Errorf("%s: ids\n got %v\nwant %v", c.Name, ids, want[i].IDs)
				}
			}
		})
	}
}
