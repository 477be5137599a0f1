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
