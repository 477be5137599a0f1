package usage

// One-pass readers of the delta events of the Responses stream, the
// bulk of it, in the manner of chunk.go: no allocation, and an answer
// only when sure. Anything else — another event, malformed input, a field
// given twice, a key that is not plain ASCII, a field the reference
// reading decodes — is left to the stream's parseSlow, which decides
// (FuzzResponsesStreamDifferential).

// The fields of responsesEventWire in field()'s form: a field's index is
// its bit.
var responsesEventFields = [...]string{"type", "delta", "item", "response", "code", "error"}

// plainString reads a string value that is its own decoding; anything
// else (another type, escapes) is unsure.
func (s *chunkScan) plainString() (jsonString, bool) {
	if s.peek() != '"' {
		return jsonString{}, false
	}
	str, ok := s.str()
	return str, ok && str.plain
}

// textValue reads a value of a json.RawMessage field whose length counts
// only when it is a string.
func (s *chunkScan) textValue() (n int, ok bool) {
	if s.peek() == '"' {
		str, ok := s.str()
		return str.n, ok
	}
	return 0, s.skip()
}

// scanResponsesDelta reads a Responses delta event (responsesDeltas).
func scanResponsesDelta(data []byte) (out Output, n int, ok bool) {
	s := chunkScan{d: data}
	s.ws()
	if s.peek() != '{' {
		return NoOutput, 0, false
	}
	s.i++
	var seen uint8
	var typ jsonString
	for first := true; ; first = false {
		key, end, ok := s.next(first)
		if !ok {
			return NoOutput, 0, false
		}
		if end {
			break
		}
		f, ok := field(key, responsesEventFields[:], &seen)
		if !ok {
			return NoOutput, 0, false
		}
		switch f {
		case 0:
			if typ, ok = s.plainString(); !ok {
				return NoOutput, 0, false
			}
		case 1:
			if n, ok = s.textValue(); !ok {
				return NoOutput, 0, false
			}
		case -1:
			if !s.skip() {
				return NoOutput, 0, false
			}
		default:
			return NoOutput, 0, false
		}
	}
	s.ws()
	if s.i != len(s.d) || typ.body == nil {
		return NoOutput, 0, false
	}
	if out = responsesDeltaKind(typ.body); out == NoOutput {
		return NoOutput, 0, false
	}
	return out, n, true
}
