package usage

import (
	"bytes"
	"unicode/utf8"
)

// The lexical half of chunkScan. Validation follows encoding/json's
// scanner exactly (the JSON grammar, whitespace = space, tab, CR, LF; any
// byte ≥ 0x20 inside a string, invalid UTF-8 included), because the tap
// must reject what encoding/json rejects; decoded lengths follow
// encoding/json's unquote, because the content byte counts must not move.

// maxSkipDepth bounds the nesting skip follows itself (one bit per level
// in a uint64); deeper input is left to encoding/json and its own limit.
const maxSkipDepth = 64

func (s *chunkScan) peek() byte {
	if s.i < len(s.d) {
		return s.d[s.i]
	}
	return 0
}

func (s *chunkScan) ws() { s.i = skipWS(s.d, s.i) }

// Locals rather than s's fields in the loops below: the compiler cannot
// keep fields reached through a pointer in registers.
func skipWS(d []byte, i int) int {
	for i < len(d) && class[d[i]]&space != 0 {
		i++
	}
	return i
}

// Byte classes for the scanning loops.
const (
	space   = 1 << iota // JSON whitespace
	strByte             // stands for itself inside a string
	keyByte             // may appear in a key the scan matches itself
)

var class = func() (t [256]uint8) {
	for _, c := range " \t\n\r" {
		t[c] |= space
	}
	for c := 0x20; c < 0x80; c++ {
		if c != '"' && c != '\\' {
			t[c] |= strByte
			if c != 0x7f {
				t[c] |= keyByte
			}
		}
	}
	return t
}()

func (s *chunkScan) lit(word string) bool {
	if !bytes.HasPrefix(s.d[s.i:], []byte(word)) {
		return false
	}
	s.i += len(word)
	return true
}

// next moves to the following member of an object whose '{' has been
// read, leaving s.i at its value, or reports the end at '}'. Keys must be
// plain printable ASCII: escapes and other bytes in a key are unsure (ok
// false), since encoding/json decodes and Unicode-folds keys before
// matching them (an "ſ" matches an "s").
func (s *chunkScan) next(first bool) (key []byte, end, ok bool) {
	d := s.d
	i := skipWS(d, s.i)
	if i < len(d) && d[i] == '}' {
		s.i = i + 1
		return nil, true, true
	}
	if !first {
		if i >= len(d) || d[i] != ',' {
			return nil, false, false
		}
		i = skipWS(d, i+1)
	}
	if i >= len(d) || d[i] != '"' {
		return nil, false, false
	}
	start := i + 1
	i = start
	for i < len(d) && class[d[i]]&keyByte != 0 {
		i++
	}
	if i >= len(d) || d[i] != '"' {
		return nil, false, false
	}
	key = d[start:i]
	s.i = i + 1
	if !s.colon() {
		return nil, false, false
	}
	return key, false, true
}

func (s *chunkScan) colon() bool {
	d := s.d
	i := skipWS(d, s.i)
	if i >= len(d) || d[i] != ':' {
		return false
	}
	s.i = skipWS(d, i+1)
	return true
}

// elem moves to the following element of an array whose '[' has been
// read, leaving s.i at it, or reports the end at ']'.
func (s *chunkScan) elem(first bool) (end, ok bool) {
	s.ws()
	c := s.peek()
	if c == ']' {
		s.i++
		return true, true
	}
	if !first {
		if c != ',' {
			return false, false
		}
		s.i++
		s.ws()
	}
	return false, true
}

// stringOrNull reads the value of a string or *string field; anything
// else is a type error, left to the reference.
func (s *chunkScan) stringOrNull() (str jsonString, isStr, ok bool) {
	switch s.peek() {
	case '"':
		str, ok = s.str()
		return str, ok, ok
	case 'n':
		return jsonString{}, false, s.lit("null")
	}
	return jsonString{}, false, false
}

// str reads the string whose opening quote is at s.i and measures it as
// encoding/json's unquote decodes it: an escape becomes its character; a
// \u escape for a UTF-16 surrogate that is not the first half of a valid
// pair, and each byte of invalid UTF-8, become U+FFFD (3 bytes).
func (s *chunkScan) str() (jsonString, bool) {
	d := s.d
	start := s.i + 1
	i := start
	grow := 0 // decoded length minus raw length
	plain := true
	for {
		for i < len(d) && class[d[i]]&strByte != 0 {
			i++
		}
		if i >= len(d) {
			return jsonString{}, false
		}
		switch c := d[i]; {
		case c == '"':
			s.i = i + 1
			body := d[start:i]
			return jsonString{body: body, n: len(body) + grow, plain: plain}, true
		case c == '\\':
			plain = false
			if i+1 >= len(d) {
				return jsonString{}, false
			}
			switch d[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
				grow--
			case 'u':
				r, ok := hex4(d, i+2)
				if !ok {
					return jsonString{}, false
				}
				i += 6
				if r < 0xd800 || r >= 0xe000 {
					grow += utf8.RuneLen(r) - 6
					break
				}
				if r < 0xdc00 && i+1 < len(d) && d[i] == '\\' && d[i+1] == 'u' {
					if r2, ok := hex4(d, i+2); ok && 0xdc00 <= r2 && r2 < 0xe000 {
						i += 6
						grow += 4 - 12 // a pair: one rune outside the BMP
						break
					}
				}
				grow += 3 - 6 // U+FFFD; a following escape is read on its own
			default:
				return jsonString{}, false
			}
		case c < 0x20:
			return jsonString{}, false
		default: // c ≥ 0x80
			r, size := utf8.DecodeRune(d[i:])
			if r == utf8.RuneError && size == 1 {
				plain = false
				grow += 2
			}
			i += size
		}
	}
}

func hex4(d []byte, i int) (rune, bool) {
	if i+4 > len(d) {
		return 0, false
	}
	var r rune
	for _, c := range d[i : i+4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// appendUnquoted appends the decoding of a string body str has validated,
// byte for byte as encoding/json decodes it.
func appendUnquoted(dst, body []byte) []byte {
	for i := 0; i < len(body); {
		c := body[i]
		switch {
		case c == '\\':
			switch e := body[i+1]; e {
			case 'b':
				dst = append(dst, '\b')
			case 'f':
				dst = append(dst, '\f')
			case 'n':
				dst = append(dst, '\n')
			case 'r':
				dst = append(dst, '\r')
			case 't':
				dst = append(dst, '\t')
			case 'u':
				r, _ := hex4(body, i+2)
				i += 6
				if 0xd800 <= r && r < 0xe000 {
					r2, ok := rune(0), false
					if r < 0xdc00 && i+1 < len(body) && body[i] == '\\' && body[i+1] == 'u' {
						r2, ok = hex4(body, i+2)
					}
					if ok && 0xdc00 <= r2 && r2 < 0xe000 {
						r = 0x10000 + (r-0xd800)<<10 + (r2 - 0xdc00)
						i += 6
					} else {
						r = utf8.RuneError
					}
				}
				dst = utf8.AppendRune(dst, r)
				continue
			default: // " \ /
				dst = append(dst, e)
			}
			i += 2
		case c < utf8.RuneSelf:
			dst = append(dst, c)
			i++
		default:
			r, size := utf8.DecodeRune(body[i:])
			dst = utf8.AppendRune(dst, r) // invalid bytes become U+FFFD
			i += size
		}
	}
	return dst
}

// number reads a number as the JSON grammar has it; its value is never
// needed (no number is decoded outside usage, which Parse reads).
func (s *chunkScan) number() bool {
	d, i := s.d, s.i
	if i < len(d) && d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && '1' <= d[i] && d[i] <= '9':
		i = digits(d, i+1)
	default:
		return false
	}
	if i < len(d) && d[i] == '.' {
		j := digits(d, i+1)
		if j == i+1 {
			return false
		}
		i = j
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		j := digits(d, i)
		if j == i {
			return false
		}
		i = j
	}
	s.i = i
	return true
}

func digits(d []byte, i int) int {
	for i < len(d) && '0' <= d[i] && d[i] <= '9' {
		i++
	}
	return i
}

// skip reads one value of any kind (s.i at its first byte) without
// decoding it. It loops rather than recurses, keeping the kind of each
// open container as one bit of stack (1 object, 0 array).
func (s *chunkScan) skip() bool {
	var stack uint64
	depth := 0
	for {
		switch s.peek() {
		case '{', '[':
			obj := s.d[s.i] == '{'
			s.i++
			s.ws()
			if (obj && s.peek() == '}') || (!obj && s.peek() == ']') {
				s.i++
				break // an empty container is a whole value
			}
			if depth == maxSkipDepth {
				return false
			}
			depth++
			stack <<= 1
			if obj {
				stack |= 1
				if !s.skipKey() {
					return false
				}
			}
			continue // to the first member's value
		case '"':
			if _, ok := s.str(); !ok {
				return false
			}
		case 't':
			if !s.lit("true") {
				return false
			}
		case 'f':
			if !s.lit("false") {
				return false
			}
		case 'n':
			if !s.lit("null") {
				return false
			}
		default:
			if !s.number() {
				return false
			}
		}
		// A value ended: close containers until one goes on with a ','.
		for {
			if depth == 0 {
				return true
			}
			s.ws()
			c := s.peek()
			if c == ',' {
				s.i++
				s.ws()
				if stack&1 == 1 && !s.skipKey() {
					return false
				}
				break
			}
			if (stack&1 == 1 && c == '}') || (stack&1 == 0 && c == ']') {
				s.i++
				stack >>= 1
				depth--
				continue
			}
			return false
		}
	}
}

// skipKey reads a key of a skipped object, any valid string, and its ':'.
func (s *chunkScan) skipKey() bool {
	if s.peek() != '"' {
		return false
	}
	if _, ok := s.str(); !ok {
		return false
	}
	return s.colon()
}
