package tokenizer

import (
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
	"golang.org/x/text/unicode/norm"
)

// bpeTokenizer is the whole encode pipeline of a Hugging Face byte-level BPE
// tokenizer (or of a tiktoken encoding, which is the same pipeline with a
// different merge rule), in the order HF runs it:
//
//	added tokens on the raw text → normalizer → added tokens on the
//	normalized text → pre-tokenizer splits → BPE per piece
//
// Every stage works on raw bytes: ByteLevel's byte→character mapping is a
// bijection, so it is applied to the vocabulary once at load instead of to
// every input.
type bpeTokenizer struct {
	name      string
	normalize func(string) string // nil: identity
	rawAdded  *addedSet           // tokens matched before normalization
	normAdded *addedSet           // tokens matched after it
	splits    []*splitter
	model     model
	pieces    [][]byte // id → the bytes it stands for (added tokens: their text)
}

func (t *bpeTokenizer) Name() string   { return t.name }
func (t *bpeTokenizer) VocabSize() int { return len(t.pieces) }

func (t *bpeTokenizer) Encode(text string) []int {
	ids := t.appendIDs(nil, text)
	out := make([]int, len(ids))
	for i, id := range ids {
		out[i] = int(id)
	}
	return out
}

var idsPool = sync.Pool{New: func() any { s := make([]int32, 0, 1024); return &s }}

func (t *bpeTokenizer) Count(text string) int {
	p := idsPool.Get().(*[]int32)
	ids := t.appendIDs((*p)[:0], text)
	n := len(ids)
	if cap(ids) <= 1<<16 { // do not keep a huge buffer alive in the pool
		*p = ids[:0]
	}
	idsPool.Put(p)
	return n
}

func (t *bpeTokenizer) Decode(ids []int) string {
	var b strings.Builder
	for _, id := range ids {
		if id >= 0 && id < len(t.pieces) {
			b.Write(t.pieces[id])
		}
	}
	return b.String()
}

func (t *bpeTokenizer) appendIDs(dst []int32, text string) []int32 {
	// HF takes a Rust &str, always valid UTF-8, and text from a JSON body
	// is too. Anything else gets U+FFFD per run of bad bytes, so that the
	// rest still counts.
	text = strings.ToValidUTF8(text, "\uFFFD")
	t.rawAdded.each(text, func(seg string, id int32) {
		if id >= 0 {
			dst = append(dst, id)
			return
		}
		if t.normalize != nil {
			seg = t.normalize(seg)
		}
		t.normAdded.each(seg, func(seg string, id int32) {
			if id >= 0 {
				dst = append(dst, id)
				return
			}
			dst = t.appendPreTokenized(dst, seg)
		})
	})
	return dst
}

type pieceBuf struct{ a, b []string }

var piecePool = sync.Pool{New: func() any { return new(pieceBuf) }}

func (t *bpeTokenizer) appendPreTokenized(dst []int32, seg string) []int32 {
	if len(t.splits) == 0 {
		return t.model.appendPiece(dst, seg)
	}
	pb := piecePool.Get().(*pieceBuf)
	cur := append(pb.a[:0], seg)
	next := pb.b[:0]
	// Each Split sees each piece of the one before on its own, as HF's
	// PreTokenizedString does: lookarounds stop at piece boundaries.
	for _, sp := range t.splits {
		next = next[:0]
		for _, p := range cur {
			next = sp.appendSplits(next, p)
		}
		cur, next = next, cur
	}
	for _, p := range cur {
		dst = t.model.appendPiece(dst, p)
	}
	clear(cur)
	clear(next)
	pb.a, pb.b = cur[:0], next[:0]
	piecePool.Put(pb)
	return dst
}

// splitBehavior is what a Split does with a match, as HF names it.
type splitBehavior int

const (
	isolated splitBehavior = iota
	removed
	mergedWithPrevious
	mergedWithNext
	contiguous
)

var splitBehaviors = map[string]splitBehavior{
	"Isolated":           isolated,
	"Removed":            removed,
	"MergedWithPrevious": mergedWithPrevious,
	"MergedWithNext":     mergedWithNext,
	"Contiguous":         contiguous,
}

// splitter is one Split pre-tokenizer. regexp2 rather than regexp because
// the patterns use (?!\S), and because its default (.NET) mode splits as
// Oniguruma, which HF uses, does on these patterns.
type splitter struct {
	re       *regexp2.Regexp
	fast     matcher // nil: run re
	behavior splitBehavior
}

func newSplitter(pattern string, b splitBehavior) (*splitter, error) {
	re, err := regexp2.Compile(pattern, regexp2.None)
	if err != nil {
		return nil, err
	}
	return &splitter{re: re, fast: fastMatchers[pattern], behavior: b}, nil
}

// appendSplits appends the pieces of s; empty pieces are dropped, as HF does.
func (sp *splitter) appendSplits(dst []string, s string) []string {
	if s == "" {
		return dst
	}
	st := splitState{s: s, dst: dst, behavior: sp.behavior, pending: 0}
	if sp.behavior == contiguous {
		st.pending = -1 // no run of matches yet
	}
	if sp.fast != nil {
		for i := 0; i < len(s); {
			end := sp.fast(s, i)
			if end <= i {
				_, n := utf8.DecodeRuneInString(s[i:])
				i += n
				continue
			}
			st.match(i, end)
			i = end
		}
		return st.finish()
	}
	cur := runeCursor{s: s, ascii: isASCII(s)}
	m, _ := sp.re.FindStringMatch(s)
	for ; m != nil; m, _ = sp.re.FindNextMatch(m) {
		start := cur.byteAt(m.Index)
		end := cur.byteAt(m.Index + m.Length)
		if end > start {
			st.match(start, end)
		}
	}
	return st.finish()
}

// splitState turns the matches in s into pieces according to a behavior.
type splitState struct {
	s        string
	dst      []string
	behavior splitBehavior
	last     int // end of the previous match
	pending  int // start of a piece not yet emitted (MergedWithNext, Contiguous)
}

func (st *splitState) match(start, end int) {
	s := st.s
	switch st.behavior {
	case isolated:
		st.dst = appendNonEmpty(st.dst, s[st.last:start])
		st.dst = append(st.dst, s[start:end])
	case removed:
		st.dst = appendNonEmpty(st.dst, s[st.last:start])
	case mergedWithPrevious:
		st.dst = append(st.dst, s[st.last:end])
	case mergedWithNext:
		st.dst = appendNonEmpty(st.dst, s[st.pending:start])
		st.pending = start
	case contiguous:
		if st.pending < 0 || start > st.last {
			if st.pending >= 0 {
				st.dst = append(st.dst, s[st.pending:st.last])
			}
			st.dst = appendNonEmpty(st.dst, s[st.last:start])
			st.pending = start
		}
	}
	st.last = end
}

func (st *splitState) finish() []string {
	switch st.behavior {
	case mergedWithNext:
		return appendNonEmpty(st.dst, st.s[st.pending:])
	case contiguous:
		if st.pending >= 0 {
			st.dst = append(st.dst, st.s[st.pending:st.last])
		}
	}
	return appendNonEmpty(st.dst, st.s[st.last:])
}

func appendNonEmpty(dst []string, s string) []string {
	if s == "" {
		return dst
	}
	return append(dst, s)
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// runeCursor turns regexp2's rune offsets into byte offsets. Matches come in
// increasing order, so a forward-only walk is linear over the whole string.
type runeCursor struct {
	s           string
	ascii       bool
	runes, byte int
}

func (c *runeCursor) byteAt(r int) int {
	if c.ascii {
		return r
	}
	for c.runes < r {
		_, n := utf8.DecodeRuneInString(c.s[c.byte:])
		c.byte += n
		c.runes++
	}
	return c.byte
}

// addedSet finds added tokens in text: leftmost match first, longest among
// those starting there (the aho-corasick LeftmostLongest that HF uses).
type addedSet struct {
	first  [256]bool
	nodes  []trieNode
	tokens []addedToken
}

type addedToken struct {
	id             int32
	lstrip, rstrip bool
}

type trieNode struct {
	next map[byte]int32
	tok  int32 // index into tokens, -1 if no token ends here
}

func newAddedSet() *addedSet { return &addedSet{nodes: []trieNode{{tok: -1}}} }

func (a *addedSet) add(content string, tok addedToken) {
	if content == "" {
		return
	}
	n := int32(0)
	for i := 0; i < len(content); i++ {
		nx, ok := a.nodes[n].next[content[i]]
		if !ok {
			if a.nodes[n].next == nil {
				a.nodes[n].next = map[byte]int32{}
			}
			nx = int32(len(a.nodes))
			a.nodes[n].next[content[i]] = nx
			a.nodes = append(a.nodes, trieNode{tok: -1})
		}
		n = nx
	}
	a.first[content[0]] = true
	if a.nodes[n].tok >= 0 {
		a.tokens[a.nodes[n].tok] = tok
		return
	}
	a.nodes[n].tok = int32(len(a.tokens))
	a.tokens = append(a.tokens, tok)
}

// find returns the leftmost-longest match at or after from.
func (a *addedSet) find(s string, from int) (start, end int, tok addedToken, ok bool) {
	for i := from; i < len(s); i++ {
		if !a.first[s[i]] {
			continue
		}
		n, best := int32(0), int32(-1)
		for j := i; j < len(s); j++ {
			nx, ok := a.nodes[n].next[s[j]]
			if !ok {
				break
			}
			n = nx
			if a.nodes[n].tok >= 0 {
				best, end = a.nodes[n].tok, j+1
			}
		}
		if best >= 0 {
			return i, end, a.tokens[best], true
		}
	}
	return 0, 0, addedToken{}, false
}

// each calls fn for the text between tokens (id -1) and for each token, in
// order. lstrip/rstrip tokens take the whitespace beside them along.
func (a *addedSet) each(s string, fn func(seg string, id int32)) {
	if a == nil || len(a.tokens) == 0 {
		fn(s, -1)
		return
	}
	done := 0
	for pos := 0; ; {
		start, end, tok, ok := a.find(s, pos)
		if !ok {
			break
		}
		if tok.lstrip {
			start = max(len(strings.TrimRightFunc(s[:start], unicode.IsSpace)), done)
		}
		if tok.rstrip {
			end = len(s) - len(strings.TrimLeftFunc(s[end:], unicode.IsSpace))
		}
		if start > done {
			fn(s[done:start], -1)
		}
		fn(s[start:end], tok.id)
		done, pos = end, end
	}
	if done < len(s) {
		fn(s[done:], -1)
	}
}

// normalizers HF has that byte-level models use. x/text's tables follow
// Unicode 15; HF's follow the Rust crate's, see README.md in testdata.
var normForms = map[string]norm.Form{"NFC": norm.NFC, "NFD": norm.NFD, "NFKC": norm.NFKC, "NFKD": norm.NFKD}
