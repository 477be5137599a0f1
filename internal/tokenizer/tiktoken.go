package tokenizer

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"strconv"

	"github.com/pkoukk/tiktoken-go-loader/assets"
)

// tiktokenSpec describes one of OpenAI's encodings: the rank file shipped
// by tiktoken-go-loader, its split pattern and its special tokens, as in
// OpenAI's tiktoken (openai_public.py).
type tiktokenSpec struct {
	file    string
	pattern string
	special map[string]int32
}

var tiktokenSpecs = map[string]tiktokenSpec{
	"o200k_base": {
		file: "o200k_base.tiktoken",
		pattern: `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?` +
			`|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?` +
			`|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`,
		special: map[string]int32{"<|endoftext|>": 199999, "<|endofprompt|>": 200018},
	},
	"cl100k_base": {
		file:    "cl100k_base.tiktoken",
		pattern: `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`,
		special: map[string]int32{
			"<|endoftext|>": 100257, "<|fim_prefix|>": 100258, "<|fim_middle|>": 100259,
			"<|fim_suffix|>": 100260, "<|endofprompt|>": 100276,
		},
	},
}

// loadTiktoken builds an encoding from its embedded rank file. Special
// tokens in the text are recognised, as Hugging Face's conversions of these
// encodings (e.g. for GPT-4o) do; OpenAI's own tiktoken would refuse them.
func loadTiktoken(name string) (*bpeTokenizer, error) {
	spec, ok := tiktokenSpecs[name]
	if !ok {
		return nil, fmt.Errorf("unknown tiktoken encoding %q", name)
	}
	data, err := assets.Assets.ReadFile(spec.file)
	if err != nil {
		return nil, fmt.Errorf("tiktoken %s: %w", name, err)
	}
	t := &bpeTokenizer{name: name}
	m := &t.model
	m.tiktoken = true
	m.ignoreMerges = true // tiktoken returns a piece that is a token as is
	m.vocab = make(map[string]int32, bytes.Count(data, []byte{'\n'})+1)
	size := 0
	for line := range bytes.Lines(data) {
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			continue
		}
		tok64, rankStr, ok := bytes.Cut(line, []byte{' '})
		if !ok {
			return nil, fmt.Errorf("tiktoken %s: bad line %q", name, line)
		}
		tok := make([]byte, base64.StdEncoding.DecodedLen(len(tok64)))
		n, err := base64.StdEncoding.Decode(tok, tok64)
		if err != nil {
			return nil, fmt.Errorf("tiktoken %s: token %q: %w", name, tok64, err)
		}
		rank, err := strconv.ParseInt(string(rankStr), 10, 32)
		if err != nil {
			return nil, fmt.Errorf("tiktoken %s: rank %q: %w", name, rankStr, err)
		}
		m.vocab[string(tok[:n])] = int32(rank)
		size = max(size, int(rank)+1)
	}
	for _, id := range spec.special {
		size = max(size, int(id)+1)
	}
	t.pieces = make([][]byte, size)
	for tok, id := range m.vocab {
		t.pieces[id] = []byte(tok)
	}
	for b := 0; b < 256; b++ {
		id, ok := m.vocab[string([]byte{byte(b)})]
		if !ok {
			return nil, fmt.Errorf("tiktoken %s: no token for byte 0x%02x", name, b)
		}
		m.byteID[b] = id
	}
	t.rawAdded = newAddedSet()
	for content, id := range spec.special {
		t.rawAdded.add(content, addedToken{id: id})
		t.pieces[id] = []byte(content)
	}
	sp, err := newSplitter(spec.pattern, isolated)
	if err != nil {
		return nil, fmt.Errorf("tiktoken %s: pattern: %w", name, err)
	}
	t.splits = []*splitter{sp}
	return t, nil
}
