package usage

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/tollgate-dev/tollgate/internal/record"
)

func readFixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestHostedChatDialects reads non-streamed chat answers of hosted
// providers' OpenAI-compatible endpoints, shaped as their documentation
// shows them, and checks the usage each becomes.
func TestHostedChatDialects(t *testing.T) {
	for _, tc := range []struct {
		file, source string
		want         record.Usage
	}{
		// prompt_tokens = prompt_cache_hit_tokens + prompt_cache_miss_tokens.
		{"deepseek_chat.json", "https://api-docs.deepseek.com/guides/kv_cache",
			record.Usage{InputTokens: 1100, CachedInputTokens: 1024, OutputTokens: 300, ReasoningTokens: 120}},
		// Kimi K2 reports the automatic prefix cache in both places.
		{"kimi_k2_chat.json", "https://platform.moonshot.ai/docs (Kimi K2 automatic caching)",
			record.Usage{InputTokens: 1113, CachedInputTokens: 1024, OutputTokens: 9}},
		// moonshot-v1's explicit context cache: the top-level cached_tokens only.
		{"moonshot_v1_cache.json", "https://platform.moonshot.cn/docs/api/caching",
			record.Usage{InputTokens: 7020, CachedInputTokens: 6998, OutputTokens: 12}},
		// Thinking is in total_tokens, not completion_tokens (a usage quoted
		// on discuss.ai.google.dev/t/question-with-usage-in-openai-compatibility/98760).
		{"gemini_openai_chat.json", "https://ai.google.dev/gemini-api/docs/openai",
			record.Usage{InputTokens: 758, OutputTokens: 967, ReasoningTokens: 865}},
		{"glm_chat.json", "https://docs.bigmodel.cn/cn/guide/capabilities/cache",
			record.Usage{InputTokens: 2000, CachedInputTokens: 1536, OutputTokens: 150}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			r, err := ParseResponse(readFixture(t, filepath.Join("dialects", tc.file)))
			if err != nil {
				t.Fatal(err)
			}
			tc.want.Source = record.SourceEngine
			if diff := cmp.Diff(&tc.want, r.Usage); diff != "" {
				t.Errorf("usage (-want +got), documented at %s:\n%s", tc.source, diff)
			}
		})
	}
}

// TestHostedStreamDialects reads the last chunk of hosted providers'
// streams, shaped as their documentation shows it, through the tap's
// parser and its encoding/json reference alike.
func TestHostedStreamDialects(t *testing.T) {
	for _, tc := range []struct {
		file, source string
		usageOnly    bool
		want         record.Usage
	}{
		// With stream_options.include_usage, a last chunk with no
		// choices; hit + miss = prompt.
		{"deepseek_stream_last.json", "https://api-docs.deepseek.com/api/create-chat-completion", true,
			record.Usage{InputTokens: 1100, CachedInputTokens: 1024, OutputTokens: 300}},
		// Moonshot's streaming example puts the usage inside the last
		// chunk's choice, beside finish_reason (moonshot-v1); the cache
		// hit is the usage's top-level cached_tokens, as in
		// moonshot_v1_cache.json. Shape from the docs as remembered, not
		// re-fetched: check it against a live stream.
		{"kimi_stream_last.json", "https://platform.moonshot.cn/docs/api/chat (stream example)", false,
			record.Usage{InputTokens: 1113, CachedInputTokens: 1024, OutputTokens: 9}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			data := readFixture(t, filepath.Join("dialects", tc.file))
			tc.want.Source = record.SourceEngine
			for name, parse := range map[string]func([]byte) (Chunk, error){"scan": ParseChunk, "reference": parseChunkSlow} {
				c, err := parse(data)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if diff := cmp.Diff(&tc.want, c.Usage); diff != "" {
					t.Errorf("%s: usage (-want +got), documented at %s:\n%s", name, tc.source, diff)
				}
				if c.UsageOnly != tc.usageOnly {
					t.Errorf("%s: usage only %t, want %t", name, c.UsageOnly, tc.usageOnly)
				}
			}
		})
	}
}
