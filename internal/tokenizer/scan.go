package tokenizer

import (
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

// Hand-written matchers for the split patterns of the models we ship.
// regexp2 is a backtracking engine that allocates per match; on these
// patterns it runs at 2–4 MB/s, too slow for a gateway that counts every
// prompt. Each matcher below reproduces regexp2's leftmost-first,
// backtracking result for one exact pattern string — the patterns are
// simple enough that the backtracking can be reasoned out per alternative —
// and FuzzFastSplit checks them against regexp2, which the golden tests
// tie to Hugging Face. A pattern not listed here still runs on regexp2.
//
// A matcher returns the end of the match that starts at i, or -1 when no
// alternative matches there (the scanner then moves one rune on, as a regex
// search does).
type matcher func(s string, i int) int

// Pattern strings exactly as they appear in tokenizer.json files and in
// tiktoken.
const (
	// Qwen2, Qwen2.5, Qwen3.
	qwenPattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// cl100k_base and Llama 3.
	cl100kPattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	o200kPattern  = `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?` +
		`|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?` +
		`|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// DeepSeek-V3 (and V2, R1): three Splits in sequence.
	deepseekDigits = `\p{N}{1,3}`
	deepseekCJK    = "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"
	deepseekMain   = "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"
)

var fastMatchers = map[string]matcher{
	qwenPattern:    func(s string, i int) int { return matchCL100k(s, i, 1) },
	cl100kPattern:  func(s string, i int) int { return matchCL100k(s, i, 3) },
	o200kPattern:   matchO200k,
	gpt2Pattern:    matchGPT2,
	deepseekDigits: func(s string, i int) int { return runOfN(s, i) },
	deepseekCJK:    matchDeepseekCJK,
	deepseekMain:   matchDeepseekMain,
	`\p{N}`:        func(s string, i int) int { return span(s, i, cN, 1) },
	`\p{N}+`:       func(s string, i int) int { return span(s, i, cN, -1) },
}

// Character classes as bits, matching regexp2's (Go's unicode tables).
const (
	cL uint16 = 1 << iota
	cN
	cLu
	cLt
	cLm
	cLo
	cLl
	cM
	cP
	cS
	cSpace // \s: [\f\n\r\t\v\x85\p{Z}]
	cCRLF
)

const (
	cUpper = cLu | cLt | cLm | cLo | cM // o200k's [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]
	cLower = cLl | cLm | cLo | cM       // o200k's [\p{Ll}\p{Lm}\p{Lo}\p{M}]
)

func classifySlow(r rune) uint16 {
	var c uint16
	for _, t := range []struct {
		bit uint16
		tab *unicode.RangeTable
	}{
		{cL, unicode.L}, {cN, unicode.N}, {cLu, unicode.Lu}, {cLt, unicode.Lt}, {cLm, unicode.Lm},
		{cLo, unicode.Lo}, {cLl, unicode.Ll}, {cM, unicode.M}, {cP, unicode.P}, {cS, unicode.S}, {cSpace, unicode.Z},
	} {
		if unicode.Is(t.tab, r) {
			c |= t.bit
		}
	}
	switch r {
	case '\f', '\n', '\r', '\t', '\v', 0x85:
		c |= cSpace
	}
	if r == '\r' || r == '\n' {
		c |= cCRLF
	}
	return c
}

// bmpClass caches the classes of the Basic Multilingual Plane (128 KB),
// built on first use; other planes are looked up each time.
var (
	bmpOnce  sync.Once
	bmpClass []uint16
)

func class(r rune) uint16 {
	if r < 0x10000 {
		bmpOnce.Do(func() {
			bmpClass = make([]uint16, 0x10000)
			for r := range rune(0x10000) {
				bmpClass[r] = classifySlow(r)
			}
		})
		return bmpClass[r]
	}
	return classifySlow(r)
}

// at decodes the rune at i with its class; past the end it reports size 0.
func at(s string, i int) (rune, uint16, int) {
	if i >= len(s) {
		return -1, 0, 0
	}
	if b := s[i]; b < utf8.RuneSelf {
		return rune(b), class(rune(b)), 1
	}
	r, n := utf8.DecodeRuneInString(s[i:])
	return r, class(r), n
}

// span returns the end of the run of runes with any of the class bits from
// i, taking at most limit runes (-1: no limit), or -1 if the run is empty.
func span(s string, i int, bits uint16, limit int) int {
	j := i
	for k := 0; k != limit; k++ {
		_, c, n := at(s, j)
		if n == 0 || c&bits == 0 {
			break
		}
		j += n
	}
	if j == i {
		return -1
	}
	return j
}

func runOfN(s string, i int) int { return span(s, i, cN, 3) }

// spanEnd is span that returns i instead of -1 for an empty run.
func spanEnd(s string, i int, bits uint16) int {
	if j := span(s, i, bits, -1); j >= 0 {
		return j
	}
	return i
}

// contraction matches (?i:'s|'t|'re|'ve|'m|'ll|'d) at i and returns its
// length in bytes, 0 if none.
//
// With foldCase, U+017F LATIN SMALL LETTER LONG S counts as s: Unicode
// simple case folding maps it to s, and Oniguruma, which HF runs these
// patterns on, follows it (its test suite has x2("(?i)s", "\xc5\xbf")), as
// does the Rust regex crate under tiktoken. regexp2 folds ASCII only here;
// this is the one place where the matchers knowingly differ from it.
func contraction(s string, i int, foldCase bool) int {
	if i+1 >= len(s) || s[i] != '\'' {
		return 0
	}
	if foldCase && strings.HasPrefix(s[i+1:], "ſ") {
		return 3
	}
	lower := func(b byte) byte {
		if foldCase && 'A' <= b && b <= 'Z' {
			return b + 'a' - 'A'
		}
		return b
	}
	switch lower(s[i+1]) {
	case 's', 't', 'm', 'd':
		return 2
	}
	if i+2 < len(s) {
		switch string([]byte{lower(s[i+1]), lower(s[i+2])}) {
		case "re", "ve", "ll":
			return 3
		}
	}
	return 0
}

// matchSpaceTail matches \s*[\r\n]+|\s+(?!\S)|\s+ at i (withNewline) or
// \s+(?!\S)|\s+ (without).
func matchSpaceTail(s string, i int, withNewline bool) int {
	j, lastNL, lastStart, runes := i, -1, i, 0
	for {
		_, c, n := at(s, j)
		if n == 0 || c&cSpace == 0 {
			break
		}
		if c&cCRLF != 0 {
			lastNL = j
		}
		lastStart = j
		j += n
		runes++
	}
	switch {
	case runes == 0:
		return -1
	case withNewline && lastNL >= 0:
		// \s* backs off to the last newline; [\r\n]+ takes just it, since
		// nothing after it in the run is a newline.
		return lastNL + 1
	case j == len(s) || runes == 1:
		return j
	default:
		// (?!\S) fails at the end of the run, so \s+ gives back its last
		// rune, which leaves whitespace after the match.
		return lastStart
	}
}

// matchCL100k is qwenPattern (maxDigits 1) and cl100kPattern (3).
func matchCL100k(s string, i, maxDigits int) int {
	r, c, n := at(s, i)
	if r == '\'' {
		if k := contraction(s, i, true); k > 0 {
			return i + k
		}
	}
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if c&(cCRLF|cL|cN) == 0 {
		if j := span(s, i+n, cL, -1); j >= 0 {
			return j
		}
	} else if c&cL != 0 {
		return span(s, i, cL, -1)
	}
	if c&cN != 0 {
		return span(s, i, cN, maxDigits)
	}
	if j := matchPunct(s, i, r, false); j >= 0 {
		return j
	}
	return matchSpaceTail(s, i, true)
}

// matchPunct matches ` ?[^\s\p{L}\p{N}]+[\r\n]*` at i, with '/' in the
// final class too when slash is set (o200k).
func matchPunct(s string, i int, r rune, slash bool) int {
	const not = cSpace | cL | cN
	j := -1
	if _, c, n := at(s, i+1); r == ' ' && n > 0 && c&not == 0 {
		j = spanNot(s, i+1, not)
	} else if _, c, n := at(s, i); n > 0 && c&not == 0 {
		j = spanNot(s, i, not)
	}
	if j < 0 {
		return -1
	}
	for j < len(s) && (s[j] == '\r' || s[j] == '\n' || slash && s[j] == '/') {
		j++
	}
	return j
}

// spanNot returns the end of the run of runes with none of the bits.
func spanNot(s string, i int, bits uint16) int {
	j := i
	for {
		_, c, n := at(s, j)
		if n == 0 || c&bits != 0 {
			return j
		}
		j += n
	}
}

func matchGPT2(s string, i int) int {
	r, c, n := at(s, i)
	if k := contraction(s, i, false); k > 0 {
		return i + k
	}
	p, pc := i, c
	if r == ' ' {
		if _, c2, n2 := at(s, i+n); n2 > 0 {
			p, pc = i+n, c2
		}
	}
	for _, bits := range []uint16{cL, cN} {
		if pc&bits != 0 {
			return span(s, p, bits, -1)
		}
		if p > i && c&bits != 0 {
			return span(s, i, bits, -1)
		}
	}
	if pc&(cSpace|cL|cN) == 0 {
		return spanNot(s, p, cSpace|cL|cN)
	}
	return matchSpaceTail(s, i, false)
}

func matchO200k(s string, i int) int {
	r, c, n := at(s, i)
	opt := c&(cCRLF|cL|cN) == 0 && n > 0
	for _, alt := range []func(string, int) int{o200kLowerTail, o200kUpperHead} {
		if opt {
			if j := alt(s, i+n); j >= 0 {
				return j
			}
		}
		if j := alt(s, i); j >= 0 {
			return j
		}
	}
	if c&cN != 0 {
		return span(s, i, cN, 3)
	}
	if j := matchPunct(s, i, r, true); j >= 0 {
		return j
	}
	return matchSpaceTail(s, i, true)
}

// o200kLowerTail is [Upper]*[Lower]+(contraction)? at p.
func o200kLowerTail(s string, p int) int {
	q := spanEnd(s, p, cUpper)
	if _, c, n := at(s, q); n > 0 && c&cLower != 0 {
		r := spanEnd(s, q, cLower)
		return r + contraction(s, r, true)
	}
	// [Upper]* gives back runes until [Lower]+ can take one; what it gets
	// is a single rune, because the rune after it is in Upper only.
	for k := q; k > p; {
		_, size := utf8.DecodeLastRuneInString(s[p:k])
		k -= size
		if class(rune0(s, k))&cLower != 0 {
			return k + size + contraction(s, k+size, true)
		}
	}
	return -1
}

func rune0(s string, i int) rune { r, _ := utf8.DecodeRuneInString(s[i:]); return r }

// o200kUpperHead is [Upper]+[Lower]*(contraction)? at p.
func o200kUpperHead(s string, p int) int {
	q := span(s, p, cUpper, -1)
	if q < 0 {
		return -1
	}
	r := spanEnd(s, q, cLower)
	return r + contraction(s, r, true)
}

func matchDeepseekCJK(s string, i int) int {
	j := i
	for j < len(s) {
		r, n := utf8.DecodeRuneInString(s[j:])
		if !(r >= 0x4e00 && r <= 0x9fa5 || r >= 0x3040 && r <= 0x309f || r >= 0x30a0 && r <= 0x30ff) {
			break
		}
		j += n
	}
	if j == i {
		return -1
	}
	return j
}

func isASCIIPunct(b byte) bool {
	return b >= '!' && b <= '/' || b >= ':' && b <= '@' || b >= '[' && b <= '`' || b >= '{' && b <= '~'
}

func isASCIILetter(b byte) bool { return b|0x20 >= 'a' && b|0x20 <= 'z' }

func matchDeepseekMain(s string, i int) int {
	if isASCIIPunct(s[i]) && i+1 < len(s) && isASCIILetter(s[i+1]) {
		j := i + 1
		for j < len(s) && isASCIILetter(s[j]) {
			j++
		}
		return j
	}
	r, c, n := at(s, i)
	// [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+
	if c&(cCRLF|cL|cP|cS) == 0 {
		if j := span(s, i+n, cL|cM, -1); j >= 0 {
			return j
		}
	}
	if c&(cL|cM) != 0 {
		return span(s, i, cL|cM, -1)
	}
	// ` ?[\p{P}\p{S}]+[\r\n]*`
	p := i
	if r == ' ' {
		if _, c2, n2 := at(s, i+1); n2 > 0 && c2&(cP|cS) != 0 {
			p = i + 1
		}
	}
	if j := span(s, p, cP|cS, -1); j >= 0 {
		for j < len(s) && (s[j] == '\r' || s[j] == '\n') {
			j++
		}
		return j
	}
	return matchSpaceTail(s, i, true)
}
