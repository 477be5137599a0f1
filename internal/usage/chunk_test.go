package usage

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// transcriptChunks returns the data of every event in the golden SSE
// transcripts, [DONE] aside: the chunk shapes real engines send.
func transcriptChunks(t testing.TB) [][]byte {
	files, err := filepath.Glob("../gateway/testdata/sse/*.sse")
	if err != nil || len(files) == 0 {
		t.Fatalf("no transcripts: %v", err)
	}
	var chunks [][]byte
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for line := range bytes.Lines(b) {
			line = bytes.TrimRight(line, "\r\n")
			data, ok := bytes.CutPrefix(line, []byte("data:"))
			if !ok {
				continue
			}
			data = bytes.TrimPrefix(data, []byte(" "))
			if string(data) != "[DONE]" {
				chunks = append(chunks, data)
			}
		}
	}
	return chunks
}

// edgeChunks are inputs where encoding/json's behaviour is easy to get
// wrong by hand. Each is compared with the reference in plain go test and
// seeds the differential fuzzer.
var edgeChunks = []string{
	// Decoded lengths: escapes, surrogates, invalid UTF-8.
	`{"choices":[{"delta":{"content":"a\nb\t\"\\\/\b\f\r"}}]}`,
	`{"choices":[{"delta":{"content":"\u00e9\u20ac\u0000\u007f\u0080\u07ff\u0800\uffff"}}]}`,
	`{"choices":[{"delta":{"content":"\ud83d\ude00 \uD83D\uDE00"}}]}`,
	`{"choices":[{"delta":{"content":"\ud800"}}]}`,
	`{"choices":[{"delta":{"content":"\udc00\ud800"}}]}`,
	`{"choices":[{"delta":{"content":"\udc00\udc00"}}]}`,
	`{"choices":[{"delta":{"content":"\ud800\ud800\udc00"}}]}`,
	`{"choices":[{"delta":{"content":"\ud800\u0041\ud800\n"}}]}`,
	`{"choices":[{"delta":{"content":"\ud800\udbff\udfff\ue000"}}]}`,
	"{\"choices\":[{\"delta\":{\"content\":\"\xff\xe2\x82 \xed\xa0\x80 \xef\xbf\xbd \xf0\x9f\x98\x80\xf0\x9f\"}}]}",
	`{"choices":[{"delta":{"reasoning_content":"é","reasoning":"日本"},"text":"x"}]}`,
	"{\"choices\":[{\"delta\":{\"content\":\"a\x01b\"}}]}",
	"{\"choices\":[{\"delta\":{\"content\":\"a\tb\"}}]}",
	"{\"choices\":[{\"delta\":{\"content\":\"a\x7fb\"}}]}",
	`{"choices":[{"delta":{"content":"\'"}}]}`,
	`{"choices":[{"delta":{"content":"\x41"}}]}`,
	`{"choices":[{"delta":{"content":"\u12"}}]}`,
	`{"choices":[{"delta":{"content":"\u12G4"}}]}`,
	`{"choices":[{"delta":{"content":"\`,
	`{"choices":[{"delta":{"content":"abc`,
	// Null and empty fields.
	`{"model":null,"choices":null,"usage":null,"error":null}`,
	`{"choices":[null]}`,
	`{"choices":[null],"usage":{"prompt_tokens":1,"completion_tokens":1}}`,
	`{"choices":null,"usage":{"prompt_tokens":1,"completion_tokens":1}}`,
	`{"usage":{"prompt_tokens":1,"completion_tokens":1}}`,
	`{"choices":[{"delta":null,"text":null,"finish_reason":null}]}`,
	`{"choices":[{"delta":{"content":null,"reasoning_content":null,"reasoning":null,"tool_calls":null}}]}`,
	`{"choices":[{"delta":{"tool_calls":[]}}]}`,
	`{"choices":[{"delta":{"tool_calls":[null]}}]}`,
	`{"choices":[{"delta":{"tool_calls":[{}]}}]}`,
	`{"choices":[{"delta":{"tool_calls":[{"function":null}]}}]}`,
	`{"choices":[{"delta":{"tool_calls":[{"function":{"name":null,"arguments":null}}]}}]}`,
	`{"choices":[{"delta":{"tool_calls":[{"function":{"name":"f","arguments":"{\"a\":1}","x":[1]},"id":"c"},{"function":{"arguments":"\u00e9"}}]}}]}`,
	`{"choices":[{"delta":{"tool_calls":[1]}}]}`,
	`{"choices":[{"delta":{"tool_calls":["x"]}}]}`,
	`{"choices":[{"delta":{"tool_calls":[[]]}}]}`,
	`{"choices":[{"delta":{"tool_calls":{}}}]}`,
	`{"choices":[{"delta":{"tool_calls":[{"function":"f"}]}}]}`,
	`{"choices":[{"delta":{"tool_calls":[{"function":{"name":1}}]}}]}`,
	`{"choices":[{"delta":{}},{"delta":{"content":""}},{"finish_reason":""}]}`,
	`{"model":"","choices":[]}`,
	// Several choices: content adds up, the last non-empty finish wins.
	`{"choices":[{"delta":{"content":"a"}},{"text":"bb","finish_reason":"length"},{"finish_reason":"stop"},{"finish_reason":""}]}`,
	`{"choices":[{"finish_reason":"st\u006fp"},{"finish_reason":"eos"}]}`,
	`{"choices":[{"finish_reason":"\ud800x"}]}`,
	// Skipped values of every kind.
	`{"x":{"a":[1,{"b":[[],{}]},"s\"\u00e9",true,false,null,-0.5e+3]},"choices":[],"y":[]}`,
	`{"id":"\u0000","object":{"\ud800":{"ſ":1}},"choices":[{"index":0,"logprobs":{"content":[{"token":"é","bytes":[195,169],"top_logprobs":[]}]},"delta":{"content":"é"}}]}`,
	`{"x":[1 2]}`, `{"x":{"a" 1}}`, `{"x":{"a":1,}}`, `{"x":[1,]}`, `{"x":{,}}`, `{"x":[,1]}`, `{"x":{1:2}}`,
	`{"x":[}`, `{"x":{]}`, `{"x":tru}`, `{"x":nul}`, `{"x":falsey}`, `{"x":True}`,
	// Duplicate keys: encoding/json merges into the earlier value.
	`{"model":"a","model":"b"}`,
	`{"model":"a","Model":null}`,
	`{"choices":[{"delta":{"content":"a"}},{"text":"b"}],"choices":[{"finish_reason":"stop"}],"choices":[{},{},{}]}`,
	`{"choices":[{"delta":{"content":"a"},"delta":{"reasoning":"bb"}}]}`,
	`{"choices":[{"delta":{"content":"a","content":"bb"}}]}`,
	`{"choices":[{"finish_reason":"stop","finish_reason":null}]}`,
	`{"choices":[{"delta":{"tool_calls":[{}],"tool_calls":null}}]}`,
	`{"choices":[{"delta":{"tool_calls":[{"function":{"name":"a","NAME":"bb"}}]}}]}`,
	`{"usage":{"prompt_tokens":1,"completion_tokens":1},"usage":null,"choices":[]}`,
	`{"error":{"type":"x"},"Error":null}`,
	// Key case and spelling: ASCII folding matches, Unicode folding too.
	`{"MODEL":"m","Choices":[{"DELTA":{"Content":"x","TOOL_CALLS":[{"Function":{"Arguments":"yy"}}]},"Finish_Reason":"stop"}]}`,
	`{"choiceſ":[{"delta":{"content":"x"}}]}`,
	`{"choices":[{"delta":{"reaſoning":"x"}}]}`,
	"{\"\xe2\x84\xaaey\":1,\"choices\":[]}",
	`{"mod\u0065l":"m"}`,
	`{"model\u0000":"m","model ":"n"," model":"o"}`,
	`{"delta":{"content":"x"},"text":"y","content":"z"}`,
	"{\"choices\xff\":[{\"text\":\"x\"}]}",
	// Trailing garbage and whitespace.
	`{"model":"m"} x`, `{"model":"m"}}`, `{}{}`, `{} `, "{}\x00", `{"model":"m",}`, `{"model":"m"`, `{"model"`, `{`,
	" \t\r\n{ \"model\" : \"m\" ,\n\"choices\" : [ { \"delta\" : { \"content\" : \"x\" } , \"finish_reason\" : null } ] , \"usage\" : null } \r\n",
	"{\"model\":\"m\"}\f", "\u00a0{}",
	// Numbers.
	`{"a":1e400,"b":-0,"c":0.0,"d":-0.0e-0,"e":1E+2,"f":123456789012345678901234567890}`,
	`{"a":01}`, `{"a":-}`, `{"a":1.}`, `{"a":.5}`, `{"a":+1}`, `{"a":1e}`, `{"a":1e+}`, `{"a":0x1}`, `{"a":NaN}`, `{"a":-01}`, `{"a":1.5.5}`,
	`{"usage":{"prompt_tokens":1e400}}`, `{"usage":{"prompt_tokens":-0,"completion_tokens":1.0}}`,
	// Top level other than an object.
	`null`, ` null `, `[]`, `"x"`, `1`, `true`, ``, ` `, `nul`, `[{"model":"m"}]`,
	// Type mismatches.
	`{"model":5}`, `{"model":{}}`, `{"model":["m"]}`, `{"model":true}`,
	`{"choices":{}}`, `{"choices":"x"}`, `{"choices":[1]}`, `{"choices":[[]]}`, `{"choices":true}`,
	`{"choices":[{"delta":"x"}]}`, `{"choices":[{"delta":[]}]}`, `{"choices":[{"text":5}]}`, `{"choices":[{"finish_reason":true}]}`,
	`{"choices":[{"delta":{"content":1}}]}`, `{"choices":[{"delta":{"content":{}}}]}`,
	// Usage and error values.
	`{"choices":[],"usage":{}}`, `{"usage":5}`, `{"usage":"x"}`, `{"usage":[]}`, `{"usage":true}`,
	`{"choices":[],"usage":{"prompt_tokens":-1,"completion_tokens":1}}`,
	`{"choices":[],"usage":{"input_tokens":10,"output_tokens":7,"output_tokens_details":{"reasoning_tokens":9}}}`,
	`{"error":"boom"}`, `{"error":{"message":"m"}}`, `{"error":{}}`, `{"error":[1]}`, `{"error":{"type":5}}`, `{"error":false}`,
	// Model strings the cache must decode.
	`{"model":"org\/name-\u00e9"}`,
	"{\"model\":\"bad\xffutf8\"}",
	`{"model":"` + strings.Repeat(`\u00e9`, 40) + `"}`,
	`{"model":"m\ud83d\ude00"}`, `{"model":"\udc00\udc00\ud800\ud800\udfff"}`,
	`{"model":"a\b\f\n\r\t\"\\\/\u00e9\ud800\udc00\udc00z"}`,
	"{\"choices\":[{\"finish_reason\":\"\\u0041\xff\"}]}",
	// Nesting beyond the scan's depth, and beyond encoding/json's.
	`{"x":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `,"choices":[{"text":"x"}]}`,
	`{"x":` + strings.Repeat(`{"a":`, 70) + "1" + strings.Repeat("}", 70) + `}`,
	`{"x":` + strings.Repeat("[", 64) + strings.Repeat("]", 64) + `}`,
	`{"x":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}`,
	// The id: a string, or no id whatever else it is.
	`{"id":"chatcmpl-\u00e9\ud800","choices":[]}`,
	"{\"id\":\"bad\xffutf8\"}",
	`{"id":null}`, `{"id":5}`, `{"id":-0.5e3}`, `{"id":true}`, `{"id":{"a":"b"}}`, `{"id":["x"]}`, `{"id":""}`,
	`{"ID":"a"}`, `{"Id":"a","id":"b"}`, `{"id":"a","id":5}`, `{"id":5,"id":"a"}`, `{"id":"a","id":null}`,
	`{"id":"a"`, `{"id":"a}`, `{"id":}`, `{"id":tru}`,
}

// sameAsReference checks ParseChunk and a ChunkParser (fresh, and holding
// another stream's model) against encoding/json: same Chunk, and the same
// error, message included.
func sameAsReference(t *testing.T, in []byte) {
	t.Helper()
	want, werr := parseChunkSlow(in)
	got, gerr := ParseChunk(in)
	compare(t, in, "ParseChunk", want, werr, got, gerr)
	p := ChunkParser{model: "other"}
	for range 2 {
		got, gerr = p.Parse(in)
		compare(t, in, "ChunkParser", want, werr, got, gerr)
	}
}

func compare(t *testing.T, in []byte, name string, want Chunk, werr error, got Chunk, gerr error) {
	t.Helper()
	if (werr == nil) != (gerr == nil) || (werr != nil && werr.Error() != gerr.Error()) {
		t.Fatalf("%s(%q): error %v, encoding/json says %v", name, in, gerr, werr)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("%s(%q) differs from encoding/json (-want +got):\n%s", name, in, diff)
	}
}

func TestParseChunkMatchesReference(t *testing.T) {
	for _, in := range edgeChunks {
		sameAsReference(t, []byte(in))
	}
	for _, in := range transcriptChunks(t) {
		sameAsReference(t, in)
	}
}

// The scan must actually cover what engines send: a scan that gave up on
// everything would still pass the differential tests.
func TestParseChunkScanCovers(t *testing.T) {
	chunks := transcriptChunks(t)
	for _, in := range []string{
		`{"MODEL":"m","Choices":[{"DELTA":{"Content":"x"}}]}`,
		`{"id":"c","object":{"\ud800":{"ſ":[1e400,-0]}},"choices":[{"index":0,"logprobs":{"content":[{"token":"é"}]},"delta":{"content":"\ud83d\ude00\ud800"}}]}`,
		`{"model":"org\/name-\u00e9","choices":[{"finish_reason":"st\u006fp"}]}`,
		`{"choices":[{"delta":{"tool_calls":[null,{"function":null},{"function":{"name":"f","arguments":""}}]}}]}`,
		`{"choices":[],"usage":{}}`, // the usage error comes from Parse
		`{"error":{"message":"m","type":"t"}}`,
	} {
		chunks = append(chunks, []byte(in))
	}
	for _, in := range chunks {
		if _, err := parseChunkSlow(in); err != nil && !strings.Contains(err.Error(), "usage") {
			continue // malformed on purpose
		}
		s := chunkScan{d: in}
		if !s.top() {
			t.Errorf("the scan leaves %q to encoding/json", in)
		}
	}
}

func TestChunkParserID(t *testing.T) {
	var p ChunkParser
	for _, tc := range []struct{ in, want string }{
		{`{"id":"chatcmpl-a","choices":[]}`, "chatcmpl-a"},
		{`{"id":"chatcmpl-a","choices":[]}`, "chatcmpl-a"},
		{`{"choices":[]}`, ""},
		{`{"id":"chatcmpl-\u00e9"}`, "chatcmpl-é"},
		{`{"id":3}`, ""},
		{`{"id":""}`, ""},
	} {
		c, err := p.Parse([]byte(tc.in))
		if err != nil || c.ID != tc.want {
			t.Errorf("Parse(%s) = id %q, %v; want %q", tc.in, c.ID, err, tc.want)
		}
	}
}

func TestChunkParserModel(t *testing.T) {
	var p ChunkParser
	for _, tc := range []struct{ in, want string }{
		{`{"model":"a"}`, "a"},
		{`{"model":"a"}`, "a"},
		{`{"choices":[]}`, ""},
		{`{"model":"b\u00e9"}`, "bé"},
		{`{"model":"bé"}`, "bé"},
		{`{"model":null}`, ""},
		{`{"model":""}`, ""},
	} {
		c, err := p.Parse([]byte(tc.in))
		if err != nil || c.Model != tc.want {
			t.Errorf("Parse(%s) = model %q, %v; want %q", tc.in, c.Model, err, tc.want)
		}
	}
}

// FuzzParseChunkDifferential holds ParseChunk to encoding/json on any
// input: the same Chunk, or the same error.
func FuzzParseChunkDifferential(f *testing.F) {
	for _, in := range transcriptChunks(f) {
		f.Add(in)
	}
	for _, in := range edgeChunks {
		f.Add([]byte(in))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		sameAsReference(t, in)
		// Byte mutations seldom leave a chunk valid JSON; placing the input
		// where the scan works hardest keeps most executions on its path.
		for _, w := range fuzzFrames {
			sameAsReference(t, []byte(w[0]+string(in)+w[1]))
		}
	})
}

// fuzzFrames put a fuzz input inside a chunk: as counted text, as the
// model, id and finish strings, as a key at a matched level, as a skipped
// value, as a tool call's members.
var fuzzFrames = [][2]string{
	{`{"choices":[{"delta":{"content":"`, `"}}]}`},
	{`{"model":"`, `","choices":[{"finish_reason":"x"}]}`},
	{`{"choices":[{"finish_reason":"`, `"}]}`},
	{`{"choices":[{"`, `":"x","text":"y"}]}`},
	{`{"id":`, `,"choices":[{"text":"y"}]}`},
	{`{"id":"`, `","choices":[{"text":"y"}]}`},
	{`{"choices":[{"delta":{"tool_calls":[`, `]}}]}`},
}
