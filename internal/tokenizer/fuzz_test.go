package tokenizer

import (
	"slices"
	"strings"
	"sync"
	"testing"

	"golang.org/x/text/unicode/norm"
)

var fuzzModels = []string{"qwen3", "deepseek-v3", "o200k_base"}

// checkEncode checks what must hold for any input: ids inside the
// vocabulary, Count agreeing with Encode, and decode(encode(s)) giving s
// back (as valid UTF-8, and NFC for Qwen, whose normalizer is NFC).
func checkEncode(t *testing.T, tok Tokenizer, s string) {
	ids := tok.Encode(s)
	for _, id := range ids {
		if id < 0 || id >= tok.VocabSize() {
			t.Fatalf("%s: id %d outside [0, %d) for %q", tok.Name(), id, tok.VocabSize(), s)
		}
	}
	if n := tok.Count(s); n != len(ids) {
		t.Fatalf("%s: Count %d, len(Encode) %d for %q", tok.Name(), n, len(ids), s)
	}
	want, got := strings.ToValidUTF8(s, "\uFFFD"), tok.Decode(ids)
	if tok.Name() == "qwen3" {
		want, got = norm.NFC.String(want), norm.NFC.String(got)
	}
	if got != want {
		t.Fatalf("%s: decode(encode(%q)) = %q", tok.Name(), s, got)
	}
}

func FuzzEncode(f *testing.F) {
	f.Add("Hello, world! It's 2024.\n\n  \tfoo")
	f.Add("大模型<|im_start|>user\n你好<｜User｜>\u3000\u00a0\ufeff 👨‍👩‍👧")
	f.Add("\xff\xfe broken utf8 \xe4\xb8")
	toks := make([]Tokenizer, len(fuzzModels))
	for i, name := range fuzzModels {
		tok, err := Builtin(name)
		if err != nil {
			f.Fatal(err)
		}
		toks[i] = tok
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, tok := range toks {
			checkEncode(t, tok, s)
		}
	})
}

// FuzzMerge checks that the heap merge and the scanning merge agree on any
// piece, for both merge rules.
func FuzzMerge(f *testing.F) {
	f.Add("internationalization")
	f.Add(strings.Repeat("中文", 20))
	f.Add("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")
	var models []*model
	for _, name := range []string{"qwen3", "o200k_base"} {
		tok, err := Builtin(name)
		if err != nil {
			f.Fatal(err)
		}
		models = append(models, &tok.(*bpeTokenizer).model)
	}
	f.Fuzz(func(t *testing.T, piece string) {
		if piece == "" || len(piece) > 4096 {
			return
		}
		for _, m := range models {
			heap := m.mergeWith(nil, piece, true)
			scan := m.mergeWith(nil, piece, false)
			if !slices.Equal(heap, scan) {
				t.Fatalf("%q: heap %v, scan %v", piece, heap, scan)
			}
		}
	})
}

func FuzzChatPrompt(f *testing.F) {
	f.Add([]byte(`{"messages":[{"role":"system","content":"s"},{"role":"user","content":"hi"}]}`))
	f.Add([]byte(`{"messages":[{"role":"assistant","content":null,"tool_calls":[{"type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","content":"1"}],"tools":[{"type":"function","function":{"name":"f"}}]}`))
	f.Add([]byte(`{"messages":[{"role":"user","content":[{"type":"text","text":"a"}]}],"chat_template_kwargs":{"enable_thinking":false}}`))
	var counters []*Counter
	for _, name := range []string{"qwen3", "deepseek-v3"} {
		c, err := Open(Spec{Tokenizer: name})
		if err != nil {
			f.Fatal(err)
		}
		counters = append(counters, c)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, c := range counters {
			n, err := c.ChatPromptTokens(body)
			if err != nil && strings.Contains(err.Error(), "panic") {
				t.Fatalf("%s: %v", c.Tokenizer().Name(), err)
			}
			if err == nil && n < 0 {
				t.Fatalf("%s: %d tokens", c.Tokenizer().Name(), n)
			}
		}
	})
}

func TestHeapMatchesScanOnCorpus(t *testing.T) {
	var corpus []string
	readJSON(t, "corpus.json", &corpus)
	corpus = append(corpus, longCJK(3000), strings.Repeat("a", 500), strings.Repeat("ab", 300))
	for _, name := range []string{"qwen3", "deepseek-v3", "o200k_base"} {
		tok, err := Builtin(name)
		if err != nil {
			t.Fatal(err)
		}
		m := &tok.(*bpeTokenizer).model
		for _, s := range corpus {
			if heap, scan := m.mergeWith(nil, s, true), m.mergeWith(nil, s, false); !slices.Equal(heap, scan) {
				t.Fatalf("%s %q: heap %v, scan %v", name, s, heap, scan)
			}
		}
	}
}

func TestConcurrentEncode(t *testing.T) {
	var corpus []string
	readJSON(t, "corpus.json", &corpus)
	tok, err := Builtin("qwen3")
	if err != nil {
		t.Fatal(err)
	}
	want := make([][]int, 200)
	for i := range want {
		want[i] = tok.Encode(corpus[i])
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range want {
				j := (i + g*50) % len(want)
				if got := tok.Encode(corpus[j]); !slices.Equal(got, want[j]) {
					t.Errorf("goroutine %d string %d differs", g, j)
					return
				}
			}
		})
	}
	wg.Wait()
}
