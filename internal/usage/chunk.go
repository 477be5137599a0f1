package usage

// The tap parses every streamed event, so ParseChunk is on the per-token
// path. encoding/json cost ~14 allocations and ~3µs per chunk; this file
// reads the few fields the tap needs in one pass over the bytes, with no
// allocation on the shapes engines send.
//
// The contract is parseChunkSlow's (the encoding/json reference), errors
// and their wording included. The scan answers only when it is sure. Any
// malformed input, and any shape whose encoding/json meaning is subtle,
// goes to the reference, which decides: escaped or non-ASCII keys (keys
// are unescaped and Unicode-folded before matching, so "choiceſ" is
// "choices"), a field given twice (the second decodes into the first,
// merging), a type mismatch, nesting deeper than maxSkipDepth.
// FuzzParseChunkDifferential holds the two together.

// ChunkParser parses the chunks of one stream. It keeps the previous
// chunk's model string, so a stream repeating the same model on every
// chunk costs no allocation per chunk. The zero value is ready to use; it
// is not safe for concurrent use.
type ChunkParser struct {
	model, id string
}

// ParseChunk reads the data of one SSE event (without "data: ").
func ParseChunk(data []byte) (Chunk, error) {
	var p ChunkParser
	return p.Parse(data)
}

// Parse is ParseChunk for the next chunk of p's stream.
func (p *ChunkParser) Parse(data []byte) (Chunk, error) {
	s := chunkScan{d: data}
	if !s.top() {
		return parseChunkSlow(data)
	}
	c := Chunk{Content: s.content, HasContent: s.hasContent}
	if s.model.body != nil {
		c.Model = cached(&p.model, s.model)
	}
	if s.id.body != nil {
		c.ID = cached(&p.id, s.id)
	}
	if s.finish.body != nil {
		c.FinishReason = finishString(s.finish)
	}
	if s.errRaw != nil {
		c.Error = errorMessage(s.errRaw)
	}
	// Usage chunks come once per stream: the reflective Parse is fine, and
	// it runs only once the whole chunk is known to be valid, as in the
	// reference.
	if s.usage == nil {
		s.usage = s.choiceUsage
	}
	if s.usage != nil {
		u, err := Parse(s.usage)
		if err != nil {
			return Chunk{}, err
		}
		c.Usage = &u
		c.UsageOnly = s.hasChoices && s.nChoices == 0
	}
	return c, nil
}

// cached returns the decoded m, reusing *prev when it is the same: the
// model and the id repeat on every chunk of a stream.
func cached(prev *string, m jsonString) string {
	b := m.body
	if !m.plain {
		var buf [64]byte
		b = appendUnquoted(buf[:0], m.body)
	}
	if string(b) != *prev { // compared without converting
		*prev = string(b)
	}
	return *prev
}

// knownFinish are the finish reasons engines send, returned without an
// allocation; anything else is converted.
var knownFinish = [...]string{"stop", "length", "tool_calls", "content_filter", "function_call", "abort", "error"}

func finishString(f jsonString) string {
	if !f.plain {
		return string(appendUnquoted(nil, f.body))
	}
	for _, k := range knownFinish {
		if string(f.body) == k {
			return k
		}
	}
	return string(f.body)
}

// jsonString is a string value as found in the input.
type jsonString struct {
	body  []byte // between the quotes, escapes still in
	n     int    // length in bytes once decoded as encoding/json decodes
	plain bool   // body is its own decoding: no escapes, valid UTF-8
}

// chunkScan is one pass over a chunk. Its methods return false when the
// input is malformed or takes a shape left to the reference.
type chunkScan struct {
	d []byte
	i int

	model, finish jsonString // finish: the last non-empty one
	id            jsonString // body nil unless a string
	content       int
	hasContent    bool
	hasChoices    bool // "choices" was an array, not absent or null
	nChoices      int
	usage, errRaw []byte // raw values, nil when absent or null
	choiceUsage   []byte // the last non-null usage inside a choice (Kimi's streams)
}

// Field names per object level, as the tags of chunkWire and
// toolCallDelta spell them. A field's index is its bit in the level's
// seen mask.
var (
	topFields      = [...]string{"model", "choices", "usage", "error", "id"}
	choiceFields   = [...]string{"delta", "text", "finish_reason", "usage"}
	deltaFields    = [...]string{"content", "reasoning_content", "reasoning", "tool_calls"}
	toolCallFields = [...]string{"function"}
	functionFields = [...]string{"name", "arguments"}
)

// field returns the index of key in names, or -1. Keys reach here only
// when plain ASCII, where encoding/json's case folding is ASCII folding.
// A field already seen is reported as unsure (ok false): encoding/json
// would merge the two values.
func field(key []byte, names []string, seen *uint8) (idx int, ok bool) {
	for i, name := range names {
		if asciiEqualFold(key, name) {
			if *seen&(1<<i) != 0 {
				return 0, false
			}
			*seen |= 1 << i
			return i, true
		}
	}
	return -1, true
}

func asciiEqualFold(key []byte, lower string) bool {
	if len(key) != len(lower) {
		return false
	}
	for i := range len(key) {
		c := key[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}

func (s *chunkScan) top() bool {
	s.ws()
	if s.peek() != '{' {
		return false // null, a non-object (a type error) or garbage
	}
	s.i++
	var seen uint8
	for first := true; ; first = false {
		key, end, ok := s.next(first)
		if !ok {
			return false
		}
		if end {
			break
		}
		f, ok := field(key, topFields[:], &seen)
		if !ok {
			return false
		}
		switch f {
		case 0: // model
			str, isStr, ok := s.stringOrNull()
			if !ok {
				return false
			}
			if isStr {
				s.model = str
			}
		case 1: // choices
			if s.peek() == 'n' {
				if !s.lit("null") {
					return false
				}
				continue
			}
			if !s.choices() {
				return false
			}
		case 2, 3: // usage, error: json.RawMessage, any value
			start := s.i
			if !s.skip() {
				return false
			}
			raw := s.d[start:s.i]
			if string(raw) == "null" {
				raw = nil
			}
			if f == 2 {
				s.usage = raw
			} else {
				s.errRaw = raw
			}
		case 4: // id: a string, or no id (see stringValue)
			if s.peek() != '"' {
				if !s.skip() {
					return false
				}
				continue
			}
			str, ok := s.str()
			if !ok {
				return false
			}
			s.id = str
		default:
			if !s.skip() {
				return false
			}
		}
	}
	s.ws()
	return s.i == len(s.d)
}

func (s *chunkScan) choices() bool {
	if s.peek() != '[' {
		return false
	}
	s.i++
	s.hasChoices = true
	for first := true; ; first = false {
		end, ok := s.elem(first)
		if !ok {
			return false
		}
		if end {
			return true
		}
		s.nChoices++
		switch s.peek() {
		case 'n': // a null element leaves a zero choice
			if !s.lit("null") {
				return false
			}
		case '{':
			if !s.choice() {
				return false
			}
		default:
			return false
		}
	}
}

func (s *chunkScan) choice() bool {
	s.i++ // '{'
	var seen uint8
	n, tools := 0, 0
	for first := true; ; first = false {
		key, end, ok := s.next(first)
		if !ok {
			return false
		}
		if end {
			break
		}
		f, ok := field(key, choiceFields[:], &seen)
		if !ok {
			return false
		}
		switch f {
		case 0: // delta
			switch s.peek() {
			case 'n':
				if !s.lit("null") {
					return false
				}
			case '{':
				if !s.delta(&n, &tools) {
					return false
				}
			default:
				return false
			}
		case 1: // text
			str, _, ok := s.stringOrNull()
			if !ok {
				return false
			}
			n += str.n
		case 2: // finish_reason
			str, isStr, ok := s.stringOrNull()
			if !ok {
				return false
			}
			if isStr && len(str.body) > 0 { // a non-empty body never decodes to ""
				s.finish = str
			}
		case 3: // usage, json.RawMessage: Kimi puts it in the last chunk's choice
			start := s.i
			if !s.skip() {
				return false
			}
			if raw := s.d[start:s.i]; string(raw) != "null" {
				s.choiceUsage = raw
			}
		default:
			if !s.skip() {
				return false
			}
		}
	}
	// A tool call's first delta may carry only an id: it is still
	// generated output, so the chunk counts as a token.
	if n > 0 || tools > 0 {
		s.hasContent = true
		s.content += n
	}
	return true
}

// delta adds the decoded lengths of the generated text to *n and the
// number of tool-call elements to *tools.
func (s *chunkScan) delta(n, tools *int) bool {
	s.i++ // '{'
	var seen uint8
	for first := true; ; first = false {
		key, end, ok := s.next(first)
		if !ok {
			return false
		}
		if end {
			return true
		}
		f, ok := field(key, deltaFields[:], &seen)
		if !ok {
			return false
		}
		switch f {
		case 0, 1, 2: // content, reasoning_content, reasoning
			str, _, ok := s.stringOrNull()
			if !ok {
				return false
			}
			*n += str.n
		case 3: // tool_calls
			if s.peek() == 'n' {
				if !s.lit("null") {
					return false
				}
				continue
			}
			if !s.toolCalls(n, tools) {
				return false
			}
		default:
			if !s.skip() {
				return false
			}
		}
	}
}

func (s *chunkScan) toolCalls(n, tools *int) bool {
	if s.peek() != '[' {
		return false
	}
	s.i++
	for first := true; ; first = false {
		end, ok := s.elem(first)
		if !ok {
			return false
		}
		if end {
			return true
		}
		*tools++ // even a null element makes the slice non-empty
		switch s.peek() {
		case 'n':
			if !s.lit("null") {
				return false
			}
		case '{':
			if !s.toolCall(n) {
				return false
			}
		default:
			return false
		}
	}
}

func (s *chunkScan) toolCall(n *int) bool {
	s.i++ // '{'
	var seen uint8
	for first := true; ; first = false {
		key, end, ok := s.next(first)
		if !ok {
			return false
		}
		if end {
			return true
		}
		f, ok := field(key, toolCallFields[:], &seen)
		if !ok {
			return false
		}
		if f != 0 {
			if !s.skip() {
				return false
			}
			continue
		}
		switch s.peek() { // function is a struct, not a pointer: null is a no-op
		case 'n':
			if !s.lit("null") {
				return false
			}
		case '{':
			if !s.function(n) {
				return false
			}
		default:
			return false
		}
	}
}

func (s *chunkScan) function(n *int) bool {
	s.i++ // '{'
	var seen uint8
	for first := true; ; first = false {
		key, end, ok := s.next(first)
		if !ok {
			return false
		}
		if end {
			return true
		}
		f, ok := field(key, functionFields[:], &seen)
		if !ok {
			return false
		}
		if f < 0 {
			if !s.skip() {
				return false
			}
			continue
		}
		str, _, ok := s.stringOrNull() // name, arguments
		if !ok {
			return false
		}
		*n += str.n
	}
}
