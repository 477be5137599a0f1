// Package tokenizer counts tokens exactly as the served model does: with the
// model's own tokenizer (a Hugging Face tokenizer.json or one of OpenAI's
// tiktoken encodings) and its chat template.
//
// It sits beside internal/usage in the request flow. The engine's usage is
// the authority; the gateway counts here when the engine gave none (a stream
// cut off, an engine that does not report usage), before a request is sent
// (admission limits, "single request > N tokens" alerts), and to check the
// engine's numbers against an independent count (the mismatch check).
//
// Ids equal those of Hugging Face's tokenizers library with
// add_special_tokens=False: special and added tokens written in the text are
// recognised as HF recognises them, and nothing is prepended. Only
// byte-level BPE (Qwen2/2.5/3, DeepSeek-V3, Llama 3, GPT-2 style) is
// implemented; a tokenizer.json using anything else is refused with an error
// naming the component.
package tokenizer

import (
	"bytes"
	"embed"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/ulikunitz/xz"
)

// Tokenizer turns text into a model's token ids and back. Implementations
// are safe for concurrent use.
type Tokenizer interface {
	// Encode returns the ids of text, without any special token added.
	Encode(text string) []int
	// Count is len(Encode(text)) without building the slice.
	Count(text string) int
	// Decode returns the bytes the ids stand for, concatenated. Unlike HF it
	// does not replace invalid UTF-8 with U+FFFD, so the decodes of the
	// pieces of a stream concatenate to the decode of the whole. Unknown ids
	// are skipped.
	Decode(ids []int) string
	// Name is the built-in name or the file the tokenizer came from.
	Name() string
	// VocabSize bounds the ids: every id Encode returns is below it.
	VocabSize() int
}

//go:embed data/qwen3/tokenizer.json.xz data/qwen3/tokenizer_config.json
//go:embed data/deepseek_v3/tokenizer.json.xz data/deepseek_v3/tokenizer_config.json
var data embed.FS

// builtin is one tokenizer shipped in the binary, built on first use only:
// decompressing and indexing a vocabulary costs ~100 ms and tens of MB,
// which a gateway serving one model should not pay for the others.
type builtin struct {
	load func() (*bpeTokenizer, error)
	// dir holds tokenizer_config.json (chat template) for HF models.
	dir  string
	once sync.Once
	tok  *bpeTokenizer
	err  error
}

var builtins = map[string]*builtin{
	"qwen3":       {dir: "data/qwen3"},
	"deepseek-v3": {dir: "data/deepseek_v3"},
	"o200k_base":  {load: func() (*bpeTokenizer, error) { return loadTiktoken("o200k_base") }},
	"cl100k_base": {load: func() (*bpeTokenizer, error) { return loadTiktoken("cl100k_base") }},
}

// BuiltinNames lists the names Builtin accepts.
func BuiltinNames() []string {
	names := make([]string, 0, len(builtins))
	for n := range builtins {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Builtin returns a tokenizer shipped in the binary. Every call with the
// same name returns the same instance.
func Builtin(name string) (Tokenizer, error) {
	b, ok := builtins[name]
	if !ok {
		return nil, fmt.Errorf("unknown built-in tokenizer %q (have %s)", name, strings.Join(BuiltinNames(), ", "))
	}
	b.once.Do(func() {
		if b.load != nil {
			b.tok, b.err = b.load()
			return
		}
		var raw []byte
		raw, b.err = readXZ(data, b.dir+"/tokenizer.json.xz")
		if b.err == nil {
			b.tok, b.err = parseHF(name, raw)
		}
	})
	if b.err != nil {
		return nil, fmt.Errorf("built-in tokenizer %s: %w", name, b.err)
	}
	return b.tok, nil
}

func readXZ(fsys embed.FS, path string) ([]byte, error) {
	f, err := fsys.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return decompressXZ(f)
}

func decompressXZ(r io.Reader) ([]byte, error) {
	zr, err := xz.NewReader(r)
	if err != nil {
		return nil, fmt.Errorf("xz: %w", err)
	}
	var buf bytes.Buffer
	if _, err := io.Copy(&buf, zr); err != nil {
		return nil, fmt.Errorf("xz: %w", err)
	}
	return buf.Bytes(), nil
}

// Load reads a Hugging Face tokenizer.json, plain or xz-compressed (by the
// .xz suffix).
func Load(path string) (Tokenizer, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load tokenizer: %w", err)
	}
	if strings.HasSuffix(path, ".xz") {
		if raw, err = decompressXZ(bytes.NewReader(raw)); err != nil {
			return nil, fmt.Errorf("load tokenizer %q: %w", path, err)
		}
	}
	t, err := parseHF(filepath.Base(path), raw)
	if err != nil {
		return nil, fmt.Errorf("load tokenizer %q: %w", path, err)
	}
	return t, nil
}

// Parse builds a tokenizer from the contents of a tokenizer.json.
func Parse(name string, tokenizerJSON []byte) (Tokenizer, error) {
	t, err := parseHF(name, tokenizerJSON)
	if err != nil {
		return nil, err
	}
	return t, nil
}
