package sim

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestCountTokens(t *testing.T) {
	tests := []struct {
		text string
		want int
	}{
		{"", 0},
		{"   \n\t", 0},
		{"hi", 1},
		{"word", 1},
		{"hello", 2},                // 5 bytes
		{"internationalization", 5}, // 20 bytes
		{"a b c", 3},
		{"Hello, world!", 6}, // 2 + 1 + 2 + 1
		{"don't", 3},         // don ' t
		{"$100", 2},          // a symbol is its own token
		{"你好世界", 3},          // 12 bytes, no spaces
		{"x...y", 5},
	}
	for _, tt := range tests {
		if got := countTokens(tt.text); got != tt.want {
			t.Errorf("countTokens(%q) = %d, want %d", tt.text, got, tt.want)
		}
		if got := len(tokenize(nil, tt.text)); got != tt.want {
			t.Errorf("len(tokenize(%q)) = %d, want %d", tt.text, got, tt.want)
		}
	}
}

func TestChatTokens(t *testing.T) {
	msgs := []chatMessage{
		{Role: "system", texts: []string{"Be brief."}},    // 3 tokens
		{Role: "user", texts: []string{"hello", "world"}}, // 4 tokens, two parts
		{Role: "assistant"},                               // no content
	}
	if got, want := len(chatTokens(msgs)), (4+4)+(4+4)+(0+4)+3; got != want {
		t.Errorf("chat prompt tokens = %d, want %d", got, want)
	}
	// A shared prefix of messages gives a shared prefix of token ids, which
	// is what makes multi-turn chats hit the prefix cache.
	a, b := chatTokens(msgs[:1]), chatTokens(msgs)
	if diff := cmp.Diff(a[:len(a)-3], b[:len(a)-3]); diff != "" {
		t.Errorf("prefix differs:\n%s", diff)
	}
}

func TestContentTexts(t *testing.T) {
	tests := []struct {
		raw  string
		want []string
	}{
		{`"plain"`, []string{"plain"}},
		{`null`, nil},
		{`[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"x"}},{"type":"text","text":"b"}]`, []string{"a", "b"}},
	}
	for _, tt := range tests {
		got, err := contentTexts(json.RawMessage(tt.raw))
		if err != nil {
			t.Errorf("contentTexts(%s): %v", tt.raw, err)
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("contentTexts(%s) (-want +got):\n%s", tt.raw, diff)
		}
	}
	if _, err := contentTexts(json.RawMessage(`{"a":1}`)); err == nil {
		t.Error("object content accepted")
	}
}

func TestVocabIsDistinctWords(t *testing.T) {
	if len(vocabSet) != len(vocab) {
		t.Errorf("vocabulary has duplicates")
	}
	for _, w := range vocab {
		if w[0] != ' ' || strings.ContainsAny(w[1:], " .,'-") || len(w) < 2 {
			t.Errorf("vocabulary entry %q is not a space and one word", w)
		}
	}
}

func FuzzTokenize(f *testing.F) {
	for _, s := range []string{"Hello, world!", "你好，世界", "a\u00a0b", "\xff\xfe", "x...y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if n, ids := countTokens(s), tokenize(nil, s); n != len(ids) {
			t.Errorf("countTokens(%q) = %d, tokenize gives %d ids", s, n, len(ids))
		}
	})
}

func TestPrefixCacheLRU(t *testing.T) {
	c := newPrefixCache(4)
	h := func(ids ...uint64) []uint64 { return ids }

	hits, a := c.acquire(h(1, 2), 2)
	if hits != 0 || len(a) != 2 || c.usage() != 0.5 {
		t.Fatalf("cold: hits %d, held %d, usage %v", hits, len(a), c.usage())
	}
	hits, b := c.acquire(h(1, 3), 2)
	if hits != 1 || c.usage() != 0.75 { // block 1 shared, counted once
		t.Fatalf("shared: hits %d, usage %v", hits, c.usage())
	}
	c.release(a)
	c.release(b)
	if c.usage() != 0 || len(c.blocks) != 3 {
		t.Fatalf("after release: usage %v, %d cached", c.usage(), len(c.blocks))
	}
	// Two new blocks in a pool of 4 holding 3 evict one: the least recently
	// freed tail block (2), not the shared prefix (1).
	_, d := c.acquire(h(5, 6), 0)
	if c.blocks[1] == nil || c.blocks[2] != nil || c.blocks[3] == nil {
		t.Errorf("evicted the wrong block: %v", c.blocks)
	}
	// A full pool of referenced blocks caches nothing more.
	_, e := c.acquire(h(7, 8, 9), 0)
	if c.usage() != 1 || len(e) != 2 {
		t.Errorf("full pool: usage %v, held %d", c.usage(), len(e))
	}
	c.release(d)
	c.release(e)
}

func TestBlockHashesChain(t *testing.T) {
	p := make([]uint32, 40)
	for i := range p {
		p[i] = uint32(i)
	}
	a := blockHashes("m", p, 16)
	q := append([]uint32(nil), p...)
	q[0] = 99 // changes the first block, and with it every later hash
	b := blockHashes("m", q, 16)
	if len(a) != 2 || a[0] == b[0] || a[1] == b[1] {
		t.Errorf("hashes %x vs %x", a, b)
	}
	if c := blockHashes("other", p, 16); c[0] == a[0] {
		t.Errorf("two models share a block hash")
	}
}
