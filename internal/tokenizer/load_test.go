package tokenizer

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dlclark/regexp2"
	"github.com/google/go-cmp/cmp"
	"github.com/ulikunitz/xz"
)

// tinyJSON is a small byte-level BPE tokenizer.json: byte b has id b,
// "hello" is built by four merges, and three added tokens sit at 300-302.
// edit may change the decoded document before it is encoded again.
func tinyJSON(t testing.TB, edit func(doc map[string]any)) []byte {
	t.Helper()
	vocab := map[string]any{}
	for b := range 256 {
		vocab[string(byteLevel[b])] = b
	}
	merges := [][2]string{{"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {"Ġ", "w"}}
	for i, m := range merges {
		vocab[m[0]+m[1]] = 256 + i
	}
	doc := map[string]any{
		"version": "1.0",
		"added_tokens": []any{
			map[string]any{"id": 300, "content": "<|x|>", "special": true},
			map[string]any{"id": 301, "content": "<|l|>", "special": true, "lstrip": true},
			map[string]any{"id": 302, "content": "<|r|>", "special": false, "rstrip": true},
		},
		"normalizer": map[string]any{"type": "NFC"},
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": qwenPattern}, "behavior": "Isolated", "invert": false},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
		}},
		"post_processor": map[string]any{"type": "ByteLevel"},
		"decoder":        map[string]any{"type": "ByteLevel"},
		"model": map[string]any{
			"type": "BPE", "dropout": nil, "unk_token": nil, "continuing_subword_prefix": "",
			"end_of_word_suffix": "", "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
			"vocab": vocab, "merges": merges,
		},
	}
	if edit != nil {
		edit(doc)
	}
	raw, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func preTok(doc map[string]any) []any {
	return doc["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)
}

func modelOf(doc map[string]any) map[string]any { return doc["model"].(map[string]any) }

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(map[string]any)
		want string
	}{
		{"normalizer", func(d map[string]any) { d["normalizer"] = map[string]any{"type": "Lowercase"} },
			`tokenizer.json: normalizer type "Lowercase" is not supported`},
		{"pre-tokenizer", func(d map[string]any) { d["pre_tokenizer"] = map[string]any{"type": "Metaspace", "replacement": "▁"} },
			`tokenizer.json: pre_tokenizer type "Metaspace" is not supported`},
		{"no byte level", func(d map[string]any) { d["pre_tokenizer"] = preTok(d)[0] },
			`tokenizer.json: pre_tokenizer has no ByteLevel step; only byte-level BPE is supported`},
		{"prefix space", func(d map[string]any) { preTok(d)[1].(map[string]any)["add_prefix_space"] = true },
			`tokenizer.json: pre_tokenizer ByteLevel with add_prefix_space=true is not supported`},
		{"invert", func(d map[string]any) { preTok(d)[0].(map[string]any)["invert"] = true },
			`tokenizer.json: pre_tokenizer Split with invert=true is not supported`},
		{"behavior", func(d map[string]any) { preTok(d)[0].(map[string]any)["behavior"] = "Sideways" },
			`tokenizer.json: pre_tokenizer Split behavior "Sideways" is not supported`},
		{"bad regex", func(d map[string]any) { preTok(d)[0].(map[string]any)["pattern"] = map[string]any{"Regex": "(a"} },
			`tokenizer.json: pre_tokenizer Split pattern "(a": error parsing regexp: missing closing ) in ` + "`(a`"},
		{"model", func(d map[string]any) { modelOf(d)["type"] = "WordPiece" },
			`tokenizer.json: model type "WordPiece" is not supported`},
		{"byte fallback", func(d map[string]any) { modelOf(d)["byte_fallback"] = true },
			`tokenizer.json: model BPE with byte_fallback is not supported`},
		{"dropout", func(d map[string]any) { modelOf(d)["dropout"] = 0.1 },
			`tokenizer.json: model BPE with dropout is not supported`},
		{"subword prefix", func(d map[string]any) { modelOf(d)["continuing_subword_prefix"] = "##" },
			`tokenizer.json: model BPE with continuing_subword_prefix is not supported`},
		{"merge out of vocab", func(d map[string]any) { modelOf(d)["merges"] = []string{"h e", "x y"} },
			`tokenizer.json: merge 1 ("x" "y") uses a token not in the vocab`},
		{"missing byte", func(d map[string]any) { delete(modelOf(d)["vocab"].(map[string]any), "a") },
			`tokenizer.json: vocab has no token for byte 0x61`},
		{"decoder", func(d map[string]any) { d["decoder"] = map[string]any{"type": "Metaspace"} },
			`tokenizer.json: decoder type "Metaspace" is not supported`},
		{"post-processor", func(d map[string]any) { d["post_processor"] = map[string]any{"type": "Mystery"} },
			`tokenizer.json: post_processor type "Mystery" is not supported`},
		{"single word", func(d map[string]any) {
			d["added_tokens"] = []any{map[string]any{"id": 300, "content": "<w>", "single_word": true}}
		}, `tokenizer.json: added token "<w>" with single_word=true is not supported`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("tiny", tinyJSON(t, tc.edit))
			if err == nil || err.Error() != tc.want {
				t.Errorf("got error %v\nwant %s", err, tc.want)
			}
		})
	}
}

func TestTinyTokenizer(t *testing.T) {
	tok, err := Parse("tiny", tinyJSON(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		text string
		want []int
	}{
		{"hello", []int{259}},
		{"hello<|x|>hello", []int{259, 300, 259}},
		// lstrip takes the spaces before the token along, rstrip those after.
		{"hello  <|l|> hello", []int{259, 301, 32, 259}},
		{"hello<|r|>  hello", []int{259, 302, 259}},
		{"hhello", []int{'h', 259}},
		// NFC: e + U+0301 becomes é (two UTF-8 bytes, no merges).
		{"e\u0301", []int{0xc3, 0xa9}},
	} {
		if got := tok.Encode(tc.text); !slices.Equal(got, tc.want) {
			t.Errorf("Encode(%q) = %v, want %v", tc.text, got, tc.want)
		}
	}
	if got := tok.Decode([]int{259, 300, 32, 259, -1, 1 << 30}); got != "hello<|x|> hello" {
		t.Errorf("Decode = %q", got)
	}
}

func TestIgnoreMerges(t *testing.T) {
	// "hlo" is in the vocab but no merge builds it: with ignore_merges the
	// piece is taken whole.
	edit := func(ignore bool) func(map[string]any) {
		return func(d map[string]any) {
			modelOf(d)["vocab"].(map[string]any)["hlo"] = 299
			modelOf(d)["ignore_merges"] = ignore
		}
	}
	for _, tc := range []struct {
		ignore bool
		want   []int
	}{{false, []int{'h', 'l', 'o'}}, {true, []int{299}}} {
		tok, err := Parse("tiny", tinyJSON(t, edit(tc.ignore)))
		if err != nil {
			t.Fatal(err)
		}
		if got := tok.Encode("hlo"); !slices.Equal(got, tc.want) {
			t.Errorf("ignore_merges=%v: got %v, want %v", tc.ignore, got, tc.want)
		}
	}
}

func TestSplitBehaviors(t *testing.T) {
	// The examples of HF's SplitDelimiterBehavior documentation.
	for _, tc := range []struct {
		behavior string
		want     []string
	}{
		{"Removed", []string{"the", "final", "countdown"}},
		{"Isolated", []string{"the", "-", "final", "-", "-", "countdown"}},
		{"MergedWithPrevious", []string{"the-", "final-", "-", "countdown"}},
		{"MergedWithNext", []string{"the", "-final", "-", "-countdown"}},
		{"Contiguous", []string{"the", "-", "final", "--", "countdown"}},
	} {
		sp, err := newSplitter(regexp2.Escape("-"), splitBehaviors[tc.behavior])
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tc.want, sp.appendSplits(nil, "the-final--countdown")); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.behavior, diff)
		}
	}
}

func TestLoadFiles(t *testing.T) {
	dir := t.TempDir()
	raw := tinyJSON(t, nil)
	plain := filepath.Join(dir, "tokenizer.json")
	if err := os.WriteFile(plain, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	w, err := xz.NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	w.Write(raw)
	w.Close()
	packed := filepath.Join(dir, "packed.json.xz")
	if err := os.WriteFile(packed, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{plain, packed} {
		tok, err := Load(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := tok.Encode("hello"); !slices.Equal(got, []int{259}) {
			t.Errorf("%s: %v", p, got)
		}
	}
	if _, err := Load(filepath.Join(dir, "missing.json")); err == nil || !strings.Contains(err.Error(), "missing.json") {
		t.Errorf("missing file: %v", err)
	}
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, tinyJSON(t, func(d map[string]any) { modelOf(d)["type"] = "Unigram" }), 0o644)
	want := `load tokenizer "` + bad + `": tokenizer.json: model type "Unigram" is not supported`
	if _, err := Load(bad); err == nil || err.Error() != want {
		t.Errorf("got %v\nwant %s", err, want)
	}
}

func TestBuiltinUnknown(t *testing.T) {
	_, err := Builtin("llama-9")
	want := `unknown built-in tokenizer "llama-9" (have cl100k_base, deepseek-v3, o200k_base, qwen3)`
	if err == nil || err.Error() != want {
		t.Errorf("got %v, want %s", err, want)
	}
}
