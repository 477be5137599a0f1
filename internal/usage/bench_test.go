package usage

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

// Chunks as OpenAI-compatible engines stream them.
var benchChunks = []struct{ name, data string }{
	{"content", `{"id":"chatcmpl-b","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" w42"},"logprobs":null,"finish_reason":null}]}`},
	{"role", `{"id":"chatcmpl-b","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`},
	{"finish", `{"id":"chatcmpl-b","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}]}`},
	{"toolcall", `{"id":"chatcmpl-7f3a","object":"chat.completion.chunk","created":1764400000,"model":"Qwen/Qwen3-8B","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":": \"Paris\"}"}}]},"logprobs":null,"finish_reason":null}]}`},
}

// BenchmarkParseChunk: encoding-json is the reference (the previous
// implementation), ParseChunk the scan, ChunkParser the scan reusing the
// model string across a stream (the tap's steady state).
func BenchmarkParseChunk(b *testing.B) {
	for _, bc := range benchChunks {
		data := []byte(bc.data)
		b.Run(bc.name+"/encoding-json", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				if _, err := parseChunkSlow(data); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(bc.name+"/ParseChunk", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				if _, err := ParseChunk(data); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(bc.name+"/ChunkParser", func(b *testing.B) {
			var p ChunkParser
			b.ReportAllocs()
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				if _, err := p.Parse(data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// tapStream is the gateway benchmark's stream: a role chunk, 64 content
// chunks, the finish and the usage chunk, [DONE].
func tapStream() []byte {
	var sb strings.Builder
	sb.WriteString("data: " + benchChunks[1].data + "\n\n")
	for i := range 64 {
		fmt.Fprintf(&sb, `data: {"id":"chatcmpl-b","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" w%d"},"logprobs":null,"finish_reason":null}]}`+"\n\n", i)
	}
	sb.WriteString("data: " + benchChunks[2].data + "\n\n")
	sb.WriteString(`data: {"id":"chatcmpl-b","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":20,"completion_tokens":64,"total_tokens":84}}` + "\n\n")
	sb.WriteString("data: [DONE]\n\n")
	return []byte(sb.String())
}

// BenchmarkTap is the usage side of the gateway's SSE tap for one whole
// stream, as streamResponse drives it: read each event, ask whether
// another is buffered, parse its data.
func BenchmarkTap(b *testing.B) {
	stream := tapStream()
	for _, bc := range []struct {
		name  string
		parse func(*ChunkParser, []byte) (Chunk, error)
	}{
		{"encoding-json", func(_ *ChunkParser, d []byte) (Chunk, error) { return parseChunkSlow(d) }},
		{"ParseChunk", func(_ *ChunkParser, d []byte) (Chunk, error) { return ParseChunk(d) }},
		{"ChunkParser", (*ChunkParser).Parse},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(stream)))
			for b.Loop() {
				er := NewEventReader(bytes.NewReader(stream), 4<<20)
				var p ChunkParser
				for {
					ev, err := er.Next()
					if err != nil {
						break
					}
					_ = er.EventBuffered()
					if ev.Data != nil && !ev.Done() {
						if _, err := bc.parse(&p, ev.Data); err != nil {
							b.Fatal(err)
						}
					}
				}
			}
		})
	}
}

// BenchmarkStreamEvent: a delta event of the Responses and Messages
// streams, the bulk of them, read by the scan (Parse) and by the
// encoding/json reference (parseSlow).
func BenchmarkStreamEvent(b *testing.B) {
	for _, bc := range []struct {
		name       string
		data       string
		fast, slow func([]byte) (StreamEvent, error)
	}{
		{"responses", `{"type":"response.output_text.delta","sequence_number":4,"item_id":"msg_67c9fdcf37fc8190ba82116e33fb28c507b8b0ad4e5eb654","output_index":0,"content_index":0,"delta":" w42","logprobs":[],"obfuscation":"Lx3"}`,
			new(ResponsesStream).Parse, new(ResponsesStream).parseSlow},
		{"messages", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" w42"}}`,
			new(MessagesStream).Parse, new(MessagesStream).parseSlow},
	} {
		data := []byte(bc.data)
		for _, m := range []struct {
			name  string
			parse func([]byte) (StreamEvent, error)
		}{{"encoding-json", bc.slow}, {"Parse", bc.fast}} {
			b.Run(bc.name+"/"+m.name, func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(len(data)))
				for b.Loop() {
					if _, err := m.parse(data); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
