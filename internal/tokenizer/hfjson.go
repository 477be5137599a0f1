package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/dlclark/regexp2"
	"golang.org/x/text/unicode/norm"
)

// The subset of tokenizer.json this package implements. Anything outside it
// is refused with an error naming the component: a tokenizer that guesses
// gives plausible but wrong counts, which is worse than none.
type hfFile struct {
	AddedTokens   []hfAddedToken  `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Decoder       json.RawMessage `json:"decoder"`
	Model         hfModel         `json:"model"`
	// truncation and padding are ignored on purpose: a count must be the
	// whole count, and engines apply their own limits.
}

type hfAddedToken struct {
	ID         int32  `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	Lstrip     bool   `json:"lstrip"`
	Rstrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

type hfModel struct {
	Type                    string           `json:"type"`
	Dropout                 *float64         `json:"dropout"`
	ContinuingSubwordPrefix *string          `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string          `json:"end_of_word_suffix"`
	ByteFallback            bool             `json:"byte_fallback"`
	IgnoreMerges            bool             `json:"ignore_merges"`
	Vocab                   map[string]int32 `json:"vocab"`
	Merges                  json.RawMessage  `json:"merges"`
}

// hfComponent holds the fields of every normalizer, pre-tokenizer and
// decoder variant that is implemented; the type decides which matter.
type hfComponent struct {
	Type             string            `json:"type"`
	Normalizers      []json.RawMessage `json:"normalizers"`
	PreTokenizers    []json.RawMessage `json:"pretokenizers"`
	Processors       []json.RawMessage `json:"processors"`
	Decoders         []json.RawMessage `json:"decoders"`
	Pattern          *hfPattern        `json:"pattern"`
	Behavior         string            `json:"behavior"`
	Invert           bool              `json:"invert"`
	AddPrefixSpace   bool              `json:"add_prefix_space"`
	UseRegex         *bool             `json:"use_regex"`
	IndividualDigits bool              `json:"individual_digits"`
}

type hfPattern struct {
	Regex  *string `json:"Regex"`
	String *string `json:"String"`
}

// gpt2Pattern is what ByteLevel splits with when its use_regex is true.
const gpt2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`

// parseHF builds a tokenizer from the bytes of a tokenizer.json.
func parseHF(name string, data []byte) (*bpeTokenizer, error) {
	var f hfFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("tokenizer.json: %w", err)
	}
	t := &bpeTokenizer{name: name}
	var err error
	if t.normalize, err = parseNormalizer(f.Normalizer); err != nil {
		return nil, err
	}
	if t.splits, err = parsePreTokenizer(f.PreTokenizer); err != nil {
		return nil, err
	}
	if err := checkDecoder(f.Decoder); err != nil {
		return nil, err
	}
	if err := checkPostProcessor(f.PostProcessor); err != nil {
		return nil, err
	}
	if err := t.loadModel(&f.Model); err != nil {
		return nil, err
	}
	if err := t.loadAdded(f.AddedTokens); err != nil {
		return nil, err
	}
	return t, nil
}

func component(raw json.RawMessage) (*hfComponent, error) {
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		return nil, nil
	}
	var c hfComponent
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, err
	}
	return &c, nil
}

func parseNormalizer(raw json.RawMessage) (func(string) string, error) {
	var forms []norm.Form
	var walk func(raw json.RawMessage) error
	walk = func(raw json.RawMessage) error {
		c, err := component(raw)
		if err != nil || c == nil {
			return err
		}
		if c.Type == "Sequence" {
			for _, n := range c.Normalizers {
				if err := walk(n); err != nil {
					return err
				}
			}
			return nil
		}
		f, ok := normForms[c.Type]
		if !ok {
			return fmt.Errorf("tokenizer.json: normalizer type %q is not supported", c.Type)
		}
		forms = append(forms, f)
		return nil
	}
	if err := walk(raw); err != nil {
		return nil, err
	}
	if len(forms) == 0 {
		return nil, nil
	}
	return func(s string) string {
		for _, f := range forms {
			s = f.String(s)
		}
		return s
	}, nil
}

func parsePreTokenizer(raw json.RawMessage) ([]*splitter, error) {
	var out []*splitter
	byteLevel := false
	var walk func(raw json.RawMessage) error
	walk = func(raw json.RawMessage) error {
		c, err := component(raw)
		if err != nil || c == nil {
			return err
		}
		switch c.Type {
		case "Sequence":
			for _, p := range c.PreTokenizers {
				if err := walk(p); err != nil {
					return err
				}
			}
			return nil
		case "Split":
			sp, err := parseSplit(c)
			if err != nil {
				return err
			}
			out = append(out, sp)
		case "Digits":
			pat := `\p{N}+`
			if c.IndividualDigits {
				pat = `\p{N}`
			}
			sp, _ := newSplitter(pat, isolated)
			out = append(out, sp)
		case "ByteLevel":
			if c.AddPrefixSpace {
				return errors.New("tokenizer.json: pre_tokenizer ByteLevel with add_prefix_space=true is not supported")
			}
			byteLevel = true
			// use_regex defaults to true when absent.
			if c.UseRegex == nil || *c.UseRegex {
				sp, _ := newSplitter(gpt2Pattern, isolated)
				out = append(out, sp)
			}
		default:
			return fmt.Errorf("tokenizer.json: pre_tokenizer type %q is not supported", c.Type)
		}
		return nil
	}
	if err := walk(raw); err != nil {
		return nil, err
	}
	if !byteLevel {
		return nil, errors.New("tokenizer.json: pre_tokenizer has no ByteLevel step; only byte-level BPE is supported")
	}
	return out, nil
}

func parseSplit(c *hfComponent) (*splitter, error) {
	if c.Invert {
		return nil, errors.New("tokenizer.json: pre_tokenizer Split with invert=true is not supported")
	}
	b, ok := splitBehaviors[c.Behavior]
	if !ok {
		return nil, fmt.Errorf("tokenizer.json: pre_tokenizer Split behavior %q is not supported", c.Behavior)
	}
	var pat string
	switch {
	case c.Pattern != nil && c.Pattern.Regex != nil:
		pat = *c.Pattern.Regex
	case c.Pattern != nil && c.Pattern.String != nil:
		pat = regexp2.Escape(*c.Pattern.String)
	default:
		return nil, errors.New("tokenizer.json: pre_tokenizer Split has no pattern")
	}
	sp, err := newSplitter(pat, b)
	if err != nil {
		return nil, fmt.Errorf("tokenizer.json: pre_tokenizer Split pattern %q: %w", pat, err)
	}
	return sp, nil
}

// checkDecoder accepts only ByteLevel, the inverse of the byte mapping this
// package applies; Decode is that inverse.
func checkDecoder(raw json.RawMessage) error {
	c, err := component(raw)
	if err != nil || c == nil {
		return err
	}
	if c.Type != "ByteLevel" {
		return fmt.Errorf("tokenizer.json: decoder type %q is not supported", c.Type)
	}
	return nil
}

// checkPostProcessor accepts the processors that only add special tokens
// (which add_special_tokens=false leaves out) or adjust offsets: none of them
// changes the ids of an encode without special tokens.
func checkPostProcessor(raw json.RawMessage) error {
	c, err := component(raw)
	if err != nil || c == nil {
		return err
	}
	switch c.Type {
	case "ByteLevel", "TemplateProcessing", "RobertaProcessing", "BertProcessing":
		return nil
	case "Sequence":
		for _, p := range c.Processors {
			if err := checkPostProcessor(p); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("tokenizer.json: post_processor type %q is not supported", c.Type)
}

func (t *bpeTokenizer) loadModel(m *hfModel) error {
	if m.Type != "BPE" && m.Type != "" {
		return fmt.Errorf("tokenizer.json: model type %q is not supported", m.Type)
	}
	switch {
	case m.Dropout != nil && *m.Dropout != 0:
		return errors.New("tokenizer.json: model BPE with dropout is not supported")
	case m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "":
		return errors.New("tokenizer.json: model BPE with continuing_subword_prefix is not supported")
	case m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "":
		return errors.New("tokenizer.json: model BPE with end_of_word_suffix is not supported")
	case m.ByteFallback:
		return errors.New("tokenizer.json: model BPE with byte_fallback is not supported")
	}
	size := 0
	mm := &t.model
	mm.ignoreMerges = m.IgnoreMerges
	mm.vocab = make(map[string]int32, len(m.Vocab))
	for tok, id := range m.Vocab {
		if id < 0 {
			return fmt.Errorf("tokenizer.json: vocab token %q has negative id %d", tok, id)
		}
		size = max(size, int(id)+1)
	}
	t.pieces = make([][]byte, size)
	byLevel := make(map[string]int32, len(m.Vocab))
	for tok, id := range m.Vocab {
		byLevel[tok] = id
		raw, ok := byteLevelDecode(tok)
		if !ok {
			// A vocab entry that is not byte-level text (DeepSeek keeps its
			// special tokens there too) can only be reached as an added
			// token; it decodes as itself.
			t.pieces[id] = []byte(tok)
			continue
		}
		mm.vocab[string(raw)] = id
		t.pieces[id] = raw
	}
	for b := 0; b < 256; b++ {
		id, ok := mm.vocab[string([]byte{byte(b)})]
		if !ok {
			return fmt.Errorf("tokenizer.json: vocab has no token for byte 0x%02x", b)
		}
		mm.byteID[b] = id
	}
	pairs, err := parseMerges(m.Merges)
	if err != nil {
		return err
	}
	mm.merges = make(map[uint64]uint64, len(pairs))
	for rank, p := range pairs {
		a, okA := byLevel[p[0]]
		b, okB := byLevel[p[1]]
		c, okC := byLevel[p[0]+p[1]]
		if !okA || !okB || !okC {
			return fmt.Errorf("tokenizer.json: merge %d (%q %q) uses a token not in the vocab", rank, p[0], p[1])
		}
		// A pair listed twice takes its last rank: HF collects the list
		// into a map in order.
		mm.merges[pairKey(a, b)] = uint64(rank)<<32 | uint64(uint32(c))
	}
	mm.fillBytePairs()
	return nil
}

// parseMerges reads both forms HF writes: "a b" strings (older files) and
// ["a", "b"] pairs (newer ones, which allow spaces in tokens).
func parseMerges(raw json.RawMessage) ([][2]string, error) {
	var pairs [][2]string
	outer := bytes.TrimSpace(raw)
	if inner := bytes.TrimSpace(bytes.TrimPrefix(outer, []byte("["))); len(inner) > 0 && inner[0] == '[' {
		if err := json.Unmarshal(raw, &pairs); err != nil {
			return nil, fmt.Errorf("tokenizer.json: model merges: %w", err)
		}
		return pairs, nil
	}
	var strs []string
	if err := json.Unmarshal(raw, &strs); err != nil {
		return nil, errors.New("tokenizer.json: model merges are neither strings nor pairs")
	}
	pairs = make([][2]string, len(strs))
	for i, s := range strs {
		a, b, ok := strings.Cut(s, " ")
		if !ok || strings.Contains(b, " ") {
			return nil, fmt.Errorf("tokenizer.json: merge %d %q is not two tokens", i, s)
		}
		pairs[i] = [2]string{a, b}
	}
	return pairs, nil
}

func (t *bpeTokenizer) loadAdded(tokens []hfAddedToken) error {
	t.rawAdded, t.normAdded = newAddedSet(), newAddedSet()
	// Later entries win on equal content, as HF's map does; sorting by id
	// makes that order deterministic.
	sort.SliceStable(tokens, func(i, j int) bool { return tokens[i].ID < tokens[j].ID })
	if n := len(tokens); n > 0 && int(tokens[n-1].ID) >= len(t.pieces) {
		grown := make([][]byte, tokens[n-1].ID+1)
		copy(grown, t.pieces)
		t.pieces = grown
	}
	for _, a := range tokens {
		if a.SingleWord {
			return fmt.Errorf("tokenizer.json: added token %q with single_word=true is not supported", a.Content)
		}
		if a.ID < 0 {
			return fmt.Errorf("tokenizer.json: added token %q has negative id %d", a.Content, a.ID)
		}
		t.pieces[a.ID] = []byte(a.Content)
		tok := addedToken{id: a.ID, lstrip: a.Lstrip, rstrip: a.Rstrip}
		if a.Normalized && t.normalize != nil {
			// HF matches a normalized token against normalized text, so the
			// token's own content is normalized first.
			t.normAdded.add(t.normalize(a.Content), tok)
		} else if a.Normalized {
			t.normAdded.add(a.Content, tok)
		} else {
			t.rawAdded.add(a.Content, tok)
		}
	}
	return nil
}

// byteLevel maps each byte to the printable character GPT-2's byte-level
// scheme uses for it; byteLevelRune is the inverse.
var byteLevel, byteLevelRune = func() ([256]rune, map[rune]byte) {
	var fwd [256]rune
	inv := make(map[rune]byte, 256)
	n := 0
	for b := 0; b < 256; b++ {
		printable := b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE
		if printable {
			fwd[b] = rune(b)
		} else {
			fwd[b] = rune(256 + n)
			n++
		}
		inv[fwd[b]] = byte(b)
	}
	return fwd, inv
}()

func byteLevelDecode(tok string) ([]byte, bool) {
	out := make([]byte, 0, len(tok))
	for _, r := range tok {
		b, ok := byteLevelRune[r]
		if !ok {
			return nil, false
		}
		out = append(out, b)
	}
	return out, true
}
