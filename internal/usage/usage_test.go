package usage

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/tollgate-dev/tollgate/internal/record"
)

func TestParseDialects(t *testing.T) {
	cases := []struct {
		name, in string
		want     record.Usage
	}{
		{"vllm", `{"prompt_tokens":42,"total_tokens":47,"completion_tokens":5}`, record.Usage{InputTokens: 42, OutputTokens: 5}},
		{"openai cached+reasoning", `{"prompt_tokens":1200,"completion_tokens":130,"total_tokens":1330,"prompt_tokens_details":{"cached_tokens":1024},"completion_tokens_details":{"reasoning_tokens":128}}`,
			record.Usage{InputTokens: 1200, CachedInputTokens: 1024, OutputTokens: 130, ReasoningTokens: 128}},
		{"responses api", `{"input_tokens":10,"output_tokens":7,"input_tokens_details":{"cached_tokens":3},"output_tokens_details":{"reasoning_tokens":2}}`,
			record.Usage{InputTokens: 10, CachedInputTokens: 3, OutputTokens: 7, ReasoningTokens: 2}},
		{"deepseek cache hit", `{"prompt_tokens":100,"completion_tokens":1,"prompt_cache_hit_tokens":64,"prompt_cache_miss_tokens":36}`,
			record.Usage{InputTokens: 100, CachedInputTokens: 64, OutputTokens: 1}},
		{"embeddings", `{"prompt_tokens":8,"total_tokens":8}`, record.Usage{InputTokens: 8}},
		{"total only", `{"total_tokens":5}`, record.Usage{InputTokens: 5}},
		{"cached clamped to input", `{"prompt_tokens":4,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":9}}`,
			record.Usage{InputTokens: 4, CachedInputTokens: 4, OutputTokens: 1}},
		{"null details", `{"prompt_tokens":4,"completion_tokens":1,"prompt_tokens_details":null}`, record.Usage{InputTokens: 4, OutputTokens: 1}},
		{"openai cache write", `{"prompt_tokens":3000,"completion_tokens":20,"total_tokens":3020,"prompt_tokens_details":{"cached_tokens":1024,"cache_write_tokens":1900}}`,
			record.Usage{InputTokens: 3000, CachedInputTokens: 1024, CacheWriteTokens: 1900, OutputTokens: 20}},
		{"responses cache write", `{"input_tokens":3000,"input_tokens_details":{"cached_tokens":0,"cache_write_tokens":2900},"output_tokens":20,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":3020}`,
			record.Usage{InputTokens: 3000, CacheWriteTokens: 2900, OutputTokens: 20}},
		{"cache write clamped to input less cached", `{"prompt_tokens":10,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":6,"cache_write_tokens":9}}`,
			record.Usage{InputTokens: 10, CachedInputTokens: 6, CacheWriteTokens: 4, OutputTokens: 1}},
		{"deepseek hit and miss without prompt_tokens", `{"completion_tokens":3,"prompt_cache_hit_tokens":64,"prompt_cache_miss_tokens":36}`,
			record.Usage{InputTokens: 100, CachedInputTokens: 64, OutputTokens: 3}},
		{"kimi top-level cached", `{"prompt_tokens":7020,"completion_tokens":12,"total_tokens":7032,"cached_tokens":6998}`,
			record.Usage{InputTokens: 7020, CachedInputTokens: 6998, OutputTokens: 12}},
		{"nested cached wins over top-level", `{"prompt_tokens":100,"completion_tokens":1,"cached_tokens":90,"prompt_tokens_details":{"cached_tokens":64}}`,
			record.Usage{InputTokens: 100, CachedInputTokens: 64, OutputTokens: 1}},
		{"gemini thinking outside completion", `{"completion_tokens":102,"prompt_tokens":758,"total_tokens":1725}`,
			record.Usage{InputTokens: 758, OutputTokens: 967, ReasoningTokens: 865}},
		{"gemini thinking reported and outside completion", `{"completion_tokens":0,"prompt_tokens":21,"total_tokens":81,"completion_tokens_details":{"reasoning_tokens":60}}`,
			record.Usage{InputTokens: 21, OutputTokens: 60, ReasoningTokens: 60}},
		{"total below the sum is no thinking", `{"prompt_tokens":10,"completion_tokens":5,"total_tokens":12}`, record.Usage{InputTokens: 10, OutputTokens: 5}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse([]byte(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			tc.want.Source = record.SourceEngine
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	for _, bad := range []string{`{}`, `{"prompt_tokens":-1,"completion_tokens":0}`, `{"prompt_tokens":"7"}`, `[]`,
		`{"prompt_tokens":5,"completion_tokens":1,"prompt_tokens_details":{"cache_write_tokens":-1}}`} {
		if u, err := Parse([]byte(bad)); err == nil {
			t.Errorf("Parse(%s) = %+v, want an error", bad, u)
		}
	}
}

func TestParseChunk(t *testing.T) {
	cases := []struct {
		name, in string
		want     Chunk
	}{
		{"role only is not a token", `{"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`, Chunk{Model: "m"}},
		{"content", `{"choices":[{"index":0,"delta":{"content":"héllo"}}]}`, Chunk{HasContent: true, Content: 6}},
		{"reasoning", `{"choices":[{"delta":{"reasoning_content":"hmm"}}]}`, Chunk{HasContent: true, Content: 3}},
		{"completions text", `{"choices":[{"text":" a","finish_reason":null}]}`, Chunk{HasContent: true, Content: 2}},
		{"finish", `{"choices":[{"delta":{},"finish_reason":"length"}]}`, Chunk{FinishReason: "length"}},
		{"tool call id only", `{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"c1","type":"function"}]}}]}`, Chunk{HasContent: true}},
		{"usage chunk", `{"choices":[],"usage":{"prompt_tokens":2,"completion_tokens":1}}`,
			Chunk{UsageOnly: true, Usage: &record.Usage{InputTokens: 2, OutputTokens: 1, Source: record.SourceEngine}}},
		{"usage null", `{"choices":[{"delta":{"content":"x"}}],"usage":null}`, Chunk{HasContent: true, Content: 1}},
		{"continuous usage", `{"choices":[{"delta":{"content":"x"}}],"usage":{"prompt_tokens":2,"completion_tokens":1}}`,
			Chunk{HasContent: true, Content: 1, Usage: &record.Usage{InputTokens: 2, OutputTokens: 1, Source: record.SourceEngine}}},
		{"error event", `{"error":{"message":"boom","type":"InternalServerError"}}`, Chunk{Error: "InternalServerError"}},
		{"response id", `{"id":"chatcmpl-7f3a","object":"chat.completion.chunk","model":"m","choices":[{"delta":{"content":"x"}}]}`,
			Chunk{ID: "chatcmpl-7f3a", Model: "m", HasContent: true, Content: 1}},
		{"id not a string is no id", `{"id":42,"choices":[{"delta":{"content":"x"}}]}`, Chunk{HasContent: true, Content: 1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseChunk([]byte(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func readEvents(t testing.TB, in string) ([]Event, error) {
	er := NewEventReader(strings.NewReader(in), 1<<10)
	var evs []Event
	for {
		ev, err := er.Next()
		if err != nil {
			if ev.Raw != nil {
				evs = append(evs, Event{Raw: bytes.Clone(ev.Raw), Data: bytes.Clone(ev.Data)})
			}
			if err == io.EOF {
				return evs, nil
			}
			return evs, err
		}
		evs = append(evs, Event{Raw: bytes.Clone(ev.Raw), Data: bytes.Clone(ev.Data)})
	}
}

func TestEventReader(t *testing.T) {
	in := ": ping\n\n" +
		"data: {\"a\":1}\n\n" +
		"\n\n" + // stray blank lines
		"event: message\r\nid: 7\r\ndata: line1\r\ndata: line2\r\n\r\n" +
		"data:nospace\n\n" +
		"data: [DONE]\n\n"
	evs, err := readEvents(t, in)
	if err != nil {
		t.Fatal(err)
	}
	want := []Event{
		{Raw: []byte(": ping\n\n")},
		{Raw: []byte("data: {\"a\":1}\n\n"), Data: []byte(`{"a":1}`)},
		{Raw: []byte("event: message\r\nid: 7\r\ndata: line1\r\ndata: line2\r\n\r\n"), Data: []byte("line1\nline2")},
		{Raw: []byte("data:nospace\n\n"), Data: []byte("nospace")},
		{Raw: []byte("data: [DONE]\n\n"), Data: []byte("[DONE]")},
	}
	if diff := cmp.Diff(want, evs); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if !evs[4].Done() || evs[1].Done() {
		t.Error("Done() wrong")
	}
	// Forwarding Raw of every event reproduces the input, bar stray blanks.
	var joined []byte
	for _, e := range evs {
		joined = append(joined, e.Raw...)
	}
	if string(joined) != strings.Replace(in, "\n\n\n\n", "\n\n", 1) {
		t.Errorf("raw bytes not preserved:\n%q", joined)
	}
}

func TestEventReaderCutAndLimit(t *testing.T) {
	evs, err := readEvents(t, "data: {\"a\":1}\n\ndata: {\"b\"")
	if !errors.Is(err, io.ErrUnexpectedEOF) || len(evs) != 2 {
		t.Errorf("cut stream: %d events, err %v; want the partial event and ErrUnexpectedEOF", len(evs), err)
	}
	_, err = readEvents(t, "data: "+strings.Repeat("x", 4000)+"\n\n")
	if !errors.Is(err, ErrEventTooLarge) {
		t.Errorf("oversized event: err %v, want ErrEventTooLarge", err)
	}
	// Lines longer than the reader's buffer are gathered whole.
	long := "data: {\"x\":\"" + strings.Repeat("y", 50<<10) + "\"}\r\n"
	in := ": c\n" + long + long + "\r\ndata: [DONE]\n\n"
	er := NewEventReader(strings.NewReader(in), 1<<20)
	ev, err := er.Next()
	if err != nil || string(ev.Raw) != ": c\n"+long+long+"\r\n" || string(ev.Data) != in[10:len(long)+2]+"\n"+in[10:len(long)+2] {
		t.Errorf("long lines: err %v, raw %d bytes, data %d bytes", err, len(ev.Raw), len(ev.Data))
	}
	if ev, err := er.Next(); err != nil || !ev.Done() {
		t.Errorf("after long lines: %q, %v", ev.Data, err)
	}
}

func seedCorpus(f *testing.F) {
	files, _ := filepath.Glob("../gateway/testdata/sse/*.sse")
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
}

// FuzzEventReader: any byte stream yields events whose Raw bytes are a
// faithful, in-order copy of the input, and never a panic.
func FuzzEventReader(f *testing.F) {
	seedCorpus(f)
	f.Fuzz(func(t *testing.T, in []byte) {
		er := NewEventReader(bytes.NewReader(in), 1<<12)
		var joined []byte
		for range 10000 {
			ev, err := er.Next()
			joined = append(joined, ev.Raw...)
			if err != nil {
				break
			}
			if ev.Data != nil && len(ev.Raw) < len(ev.Data) {
				t.Fatalf("data longer than raw: %q / %q", ev.Data, ev.Raw)
			}
		}
		if !bytes.Contains(stripBlank(in), stripBlank(joined)) {
			t.Fatalf("raw bytes are not a copy of the input:\nin  %q\nout %q", in, joined)
		}
	})
}

func stripBlank(b []byte) []byte {
	return bytes.ReplaceAll(bytes.ReplaceAll(b, []byte("\r"), nil), []byte("\n"), nil)
}

// FuzzParseChunk: no panic; any usage returned keeps the invariants.
func FuzzParseChunk(f *testing.F) {
	seedCorpus(f)
	f.Add([]byte(`{"choices":[],"usage":{"prompt_tokens":2,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":5}}}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		// Seeds are whole transcripts: also try each data line.
		for _, line := range append(bytes.Split(in, []byte("\n")), in) {
			line = bytes.TrimPrefix(bytes.TrimSpace(line), []byte("data: "))
			c, err := ParseChunk(line)
			if err != nil {
				continue
			}
			if c.Content < 0 || (c.Content > 0 && !c.HasContent) {
				t.Fatalf("content %d hasContent %v", c.Content, c.HasContent)
			}
			if u := c.Usage; u != nil {
				if u.CachedInputTokens > u.InputTokens || u.ReasoningTokens > u.OutputTokens || u.InputTokens < 0 || u.OutputTokens < 0 {
					t.Fatalf("invariants broken: %+v from %q", u, line)
				}
			}
			if !utf8.ValidString(c.FinishReason) && utf8.Valid(line) {
				t.Fatalf("finish reason not UTF-8")
			}
		}
	})
}

func TestParseResponseID(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"id":"chatcmpl-1","object":"chat.completion","model":"m","choices":[{"message":{"content":"hi"},"finish_reason":"stop"}]}`, "chatcmpl-1"},
		{`{"id":"cmpl-\u00e9","choices":[{"text":"a"}]}`, "cmpl-é"},
		{`{"object":"list","data":[],"usage":{"prompt_tokens":8,"total_tokens":8}}`, ""},
		{`{"id":null,"choices":[]}`, ""},
		{`{"id":7,"model":"m","choices":[{"text":"a","finish_reason":"stop"}]}`, ""},
		{`{"id":{"x":"y"},"choices":[]}`, ""},
	} {
		r, err := ParseResponse([]byte(tc.in))
		if err != nil || r.ID != tc.want {
			t.Errorf("ParseResponse(%s) = id %q, %v; want %q", tc.in, r.ID, err, tc.want)
		}
	}
	// An id of another type leaves the rest read.
	if r, _ := ParseResponse([]byte(`{"id":7,"model":"m","choices":[{"text":"a","finish_reason":"stop"}]}`)); r.Model != "m" || r.FinishReason != "stop" {
		t.Errorf("a numeric id lost the rest: %+v", r)
	}
}

// FuzzParseResponse: no panic; usage invariants hold.
func FuzzParseResponse(f *testing.F) {
	f.Add([]byte(`{"id":"x","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":3,"total_tokens":12}}`))
	f.Add([]byte(`{"object":"list","data":[{"embedding":[0.1]}],"usage":{"prompt_tokens":8,"total_tokens":8}}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		r, err := ParseResponse(in)
		if err != nil {
			return
		}
		if u := r.Usage; u != nil && (u.CachedInputTokens > u.InputTokens || u.ReasoningTokens > u.OutputTokens) {
			t.Fatalf("invariants broken: %+v", u)
		}
	})
}
