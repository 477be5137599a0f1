package sim

import (
	"io"
	"testing"
	"time"
)

// BenchmarkChatStream measures the sim's own cost per streamed request
// (parsing, scheduling, one SSE event per token) with near-zero model time,
// i.e. how much load generator a benchmark run has to spare.
func BenchmarkChatStream(b *testing.B) {
	cfg := Config{PrefillBase: time.Nanosecond, PrefillPerToken: time.Nanosecond, DecodeBase: time.Nanosecond, DecodePerSeq: time.Nanosecond}
	h := start(b, cfg)
	body := chatBody("benchmark the stream", "stream", true)
	b.ReportAllocs()
	for b.Loop() {
		resp := h.post("/v1/chat/completions", body, OutputTokensHeader, "64")
		io.Copy(io.Discard, resp.Body) //nolint:errcheck
		resp.Body.Close()
	}
}
