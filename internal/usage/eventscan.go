package usage

// One-pass readers of the delta events of the Responses and Messages
// streams, the bulk of them, in the manner of chunk.go: no allocation,
// and an answer only when sure. Anything else — another event, malformed
// input, a field given twice, a key that is not plain ASCII, a field the
// reference reading decodes — is left to the stream's parseSlow, which
// decides (FuzzResponsesStreamDifferential, FuzzMessagesStreamDifferential).

// The fields of responsesEventWire, and of messagesEventWire and
// messagesDelta, in field()'s form: a field's index is its bit.
var (
	responsesEventFields = [...]string{"type", "delta", "item", "response", "code", "error"}
	messagesEventFields  = [...]string{"type", "delta", "message", "content_block", "usage", "error"}
	messagesDeltaFields  = [...]string{"type", "text", "thinking", "partial_json", "stop_reason"}
)

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

// scanMessagesDelta reads an Anthropic content_block_delta event.
func scanMessagesDelta(data []byte) (out Output, n int, ok bool) {
	s := chunkScan{d: data}
	s.ws()
	if s.peek() != '{' {
		return NoOutput, 0, false
	}
	s.i++
	var seen uint8
	var typ jsonString
	hasDelta := false
	for first := true; ; first = false {
		key, end, ok := s.next(first)
		if !ok {
			return NoOutput, 0, false
		}
		if end {
			break
		}
		f, ok := field(key, messagesEventFields[:], &seen)
		if !ok {
			return NoOutput, 0, false
		}
		switch f {
		case 0:
			if typ, ok = s.plainString(); !ok {
				return NoOutput, 0, false
			}
		case 1:
			if s.peek() != '{' {
				return NoOutput, 0, false
			}
			if out, n, ok = s.messagesDelta(); !ok {
				return NoOutput, 0, false
			}
			hasDelta = true
		case -1:
			if !s.skip() {
				return NoOutput, 0, false
			}
		default:
			return NoOutput, 0, false
		}
	}
	s.ws()
	if s.i != len(s.d) || string(typ.body) != "content_block_delta" || !hasDelta {
		return NoOutput, 0, false
	}
	return out, n, true
}

// messagesDelta reads a content_block_delta's delta object: its kind,
// and the length of the text of that kind.
func (s *chunkScan) messagesDelta() (out Output, n int, ok bool) {
	s.i++ // '{'
	var seen uint8
	var typ jsonString
	var text [3]int // text, thinking, partial_json
	for first := true; ; first = false {
		key, end, ok := s.next(first)
		if !ok {
			return NoOutput, 0, false
		}
		if end {
			break
		}
		f, ok := field(key, messagesDeltaFields[:], &seen)
		if !ok {
			return NoOutput, 0, false
		}
		switch f {
		case 0:
			if typ, ok = s.plainString(); !ok {
				return NoOutput, 0, false
			}
		case 1, 2, 3:
			if text[f-1], ok = s.textValue(); !ok {
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
	out, i := messagesDeltaKind(typ.body)
	if out == NoOutput {
		return NoOutput, 0, true
	}
	return out, text[i], true
}
