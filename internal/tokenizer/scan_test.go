package tokenizer

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
)

// splitBoth splits s with the hand-written matcher and with regexp2.
func splitBoth(t testing.TB, pattern, s string) (fast, slow []string) {
	t.Helper()
	re, err := regexp2.Compile(pattern, regexp2.None)
	if err != nil {
		t.Fatal(err)
	}
	f, ok := fastMatchers[pattern]
	if !ok {
		t.Fatalf("no fast matcher for %q", pattern)
	}
	fast = (&splitter{re: re, fast: f}).appendSplits(nil, s)
	slow = (&splitter{re: re}).appendSplits(nil, s)
	return fast, slow
}

// interesting runes: every class the patterns distinguish, several byte
// lengths, and the characters around which the alternatives hinge.
var interesting = []rune("aZé ǅʰ中あア한\u0301\u0903\u20dd0٣²Ⅻ!'\"/.,-_@`~$+<>|\\:;“”「」…—\n\r\t\v\f \u00a0\u3000\u2028\u0085\u200b\ufeff\u180esStTrReEvVmMlLdDſK😀👨\u200d👩𝐀𝑎\U0001F8D0\x00\x1f")

func randomText(r *rand.Rand, n int) string {
	var b strings.Builder
	for range n {
		if r.IntN(8) == 0 {
			b.WriteRune(rune(r.IntN(0x30000)))
			continue
		}
		b.WriteRune(interesting[r.IntN(len(interesting))])
	}
	return strings.ToValidUTF8(b.String(), "\uFFFD")
}

// foldsLongS reports the one known difference from regexp2: the matchers
// fold "'ſ" to "'s" under (?i), as Oniguruma does (see contraction).
func foldsLongS(pattern, s string) bool {
	return strings.Contains(pattern, "(?i:") && strings.Contains(s, "'ſ")
}

func TestFastSplitMatchesRegexp2(t *testing.T) {
	var corpus []string
	readJSON(t, "corpus.json", &corpus)
	r := rand.New(rand.NewPCG(1, 2))
	for range 1000 {
		corpus = append(corpus, randomText(r, 1+r.IntN(60)))
	}
	for pattern := range fastMatchers {
		for _, s := range corpus {
			if foldsLongS(pattern, s) {
				continue
			}
			fast, slow := splitBoth(t, pattern, s)
			if !slices.Equal(fast, slow) {
				t.Fatalf("pattern %q on %q:\nfast %q\nslow %q", pattern, s, fast, slow)
			}
		}
	}
}

func TestSplitExamples(t *testing.T) {
	for _, tc := range []struct {
		pattern, text string
		want          []string
	}{
		// A blank line with spaces is one piece, the text around it two
		// more; tiktoken-go's tokenizer gets this one wrong.
		{qwenPattern, "a\n  \nb", []string{"a", "\n  \n", "b"}},
		{o200kPattern, "a\n  \nb", []string{"a", "\n  \n", "b"}},
		// (?!\S): the last space before a word goes with the word.
		{qwenPattern, "x   y", []string{"x", "  ", " y"}},
		{qwenPattern, "12345 大模型", []string{"1", "2", "3", "4", "5", " 大模型"}},
		{cl100kPattern, "12345 it's", []string{"123", "45", " it", "'s"}},
		{o200kPattern, "HelloWorld's", []string{"Hello", "World's"}},
		{o200kPattern, "it'ſ", []string{"it'ſ"}},
		{qwenPattern, "it'ſ x'S", []string{"it", "'ſ", " x", "'S"}},
		{deepseekMain, "(foo) bar!!\n", []string{"(foo", ")", " bar", "!!\n"}},
	} {
		fast, slow := splitBoth(t, tc.pattern, tc.text)
		if foldsLongS(tc.pattern, tc.text) {
			slow = tc.want
		}
		if !slices.Equal(fast, tc.want) || !slices.Equal(slow, tc.want) {
			t.Errorf("%q: fast %q, regexp2 %q, want %q", tc.text, fast, slow, tc.want)
		}
	}
}

func TestBuiltinsUseFastSplit(t *testing.T) {
	for _, name := range BuiltinNames() {
		tok, err := Builtin(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, sp := range tok.(*bpeTokenizer).splits {
			if sp.fast == nil {
				t.Errorf("%s: pattern %q runs on regexp2", name, sp.re.String())
			}
		}
	}
}

func FuzzFastSplit(f *testing.F) {
	f.Add("Hello, world! It's 2024.\n\n  \tfoo")
	f.Add("大模型 token？ 'S 'll\r\n\u3000x")
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			return
		}
		for pattern := range fastMatchers {
			if foldsLongS(pattern, s) {
				continue
			}
			fast, slow := splitBoth(t, pattern, s)
			if !slices.Equal(fast, slow) {
				t.Fatalf("pattern %q on %q:\nfast %q\nslow %q", pattern, s, fast, slow)
			}
		}
	})
}
