package tokenizer

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// benchTexts are ~100 KB each, drawn from a seeded generator so that they
// repeat words (as real text does, which the piece cache exploits) but not
// whole sentences (which would make the cache answer everything).
var benchTexts = map[string]string{
	"english": genText(100_000, strings.Fields("the engine usage is authority but it missing when stream cut off "+
		"does not report and needed before request sent admission limits single tokens counting with wrong "+
		"tokenizer characters makes cost numbers count must come from model own including chat template system "+
		"prompt roles special gateway observability latency throughput percentile billing reconciliation "+
		"provider export difference explained window baseline alert warning critical escalate"), " ", ".,;:!?"),
	"chinese": genText(100_000, strings.Split("大语言模型的推理服务需要精确地统计每个请求使用的令牌数量包括系统提示角色标记和特殊"+
		"流式响应被中断时引擎不会返回用量网关在发送请求之前也需要估算以便执行准入限制告警规则成本核算", ""), "", "，。、；：！？"),
	"code": genText(100_000, strings.Fields("func return err nil if for range := == != { } ( ) [ ] "+
		"ctx context.Context *Counter json.Unmarshal fmt.Errorf(\"%w\", body []byte int string "+
		"\n\t \n\t\t \n\n // tokenizer.Encode(text) c.count(req) 0x1f 42 3.14"), " ", ""),
}

// genText joins words from vocab, with punctuation now and then.
func genText(size int, vocab []string, sep, punct string) string {
	r := rand.New(rand.NewPCG(7, 11))
	p := []rune(punct)
	var b strings.Builder
	for b.Len() < size {
		w := vocab[r.IntN(len(vocab))]
		w = strings.ReplaceAll(strings.ReplaceAll(w, `\n`, "\n"), `\t`, "\t")
		b.WriteString(w)
		if len(p) > 0 && r.IntN(12) == 0 {
			b.WriteRune(p[r.IntN(len(p))])
		}
		b.WriteString(sep)
	}
	return b.String()
}

var benchModels = []string{"qwen3", "deepseek-v3", "o200k_base"}

func BenchmarkCount(b *testing.B) {
	for _, model := range benchModels {
		tok, err := Builtin(model)
		if err != nil {
			b.Fatal(err)
		}
		for _, kind := range []string{"english", "chinese", "code"} {
			text := benchTexts[kind]
			b.Run(model+"/"+kind, func(b *testing.B) {
				b.SetBytes(int64(len(text)))
				b.ReportAllocs()
				for b.Loop() {
					tok.Count(text)
				}
			})
		}
	}
}

// BenchmarkEncodeColdCache encodes text whose pieces were never seen: every
// piece goes through the merge loop.
func BenchmarkEncodeColdCache(b *testing.B) {
	tok, err := Builtin("qwen3")
	if err != nil {
		b.Fatal(err)
	}
	text := benchTexts["english"]
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		tok.(*bpeTokenizer).model.cache = pieceCache{}
		tok.Count(text)
	}
}

// BenchmarkLongCJKPiece is the denial-of-service case: Qwen and DeepSeek
// keep a run of Chinese as one pre-tokenized piece, so 100k characters
// reach the merge loop at once. It must stay in milliseconds.
func BenchmarkLongCJKPiece(b *testing.B) {
	for _, model := range []string{"qwen3", "deepseek-v3"} {
		tok, err := Builtin(model)
		if err != nil {
			b.Fatal(err)
		}
		for _, n := range []int{10_000, 100_000} {
			text := longCJK(n)
			b.Run(fmt.Sprintf("%s/%dk", model, n/1000), func(b *testing.B) {
				b.SetBytes(int64(len(text)))
				b.ReportAllocs()
				for b.Loop() {
					tok.Count(text)
				}
			})
		}
	}
}

// longCJK is n characters of common Chinese with no punctuation, so the
// whole string is a single piece.
func longCJK(n int) string {
	const chars = "的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动同工也能下过子说产种面而方后多定行学法所民得经十三之进着等部度家电力里如水化高自二理起小物现实加量都两体制机当使点从业本去把性好应开它合还因由其些然前外天政四日那社义事平形相全表间样与关各重新线内数正心反你明看原又么利比或但质气第向道命此变条只没结解问意建月公无系军很情者最立代想已通并提直题党程展五果料象员革位入常文总次品式活设及管特件长求老头基资边流路级少图山统接知较将组见计别她手角期根论运农指几九区强放决西被干做必战先回则任取据处队南给色光门即保治北造百规热领七海口东导器压志世金增争济阶油思术极交受联什认六共权收证改清己美再采转更单风切打白教速花带安场身车例真务具万每目至达走积示议声报斗完类八离华名确才科张信马节话米整空元况今集温传土许步群广石记需段研界拉林律叫且究观越织装影算低持音众书布复容儿须际商非验连断深难近矿千周委素技备半办青省列习响约支般史感劳便团往酸历市克何除消构府称太准精值号率族维划选标写存候毛亲快效斯院查江型眼王按格养易置派层片始却专状育厂京识适属圆包火住调满县局照参红细引听该铁价严"
	runes := []rune(chars)
	var sb strings.Builder
	for i := range n {
		sb.WriteRune(runes[(i*7919)%len(runes)])
	}
	return sb.String()
}

// BenchmarkChatPromptTokens is the whole path for one request body: parse,
// template, encode. The body is the golden "tools" case.
func BenchmarkChatPromptTokens(b *testing.B) {
	body := []byte(`{"model":"m","messages":[{"role":"system","content":"You are helpful."},` +
		`{"role":"user","content":"北京天气如何？"},{"role":"assistant","content":"","tool_calls":[{"type":"function",` +
		`"function":{"name":"get_weather","arguments":"{\"city\": \"北京\"}"}}]},{"role":"tool","content":"{\"temp\": 25}"},` +
		`{"role":"user","content":"谢谢"}],"tools":[{"type":"function","function":{"name":"get_weather","description":"获取天气",` +
		`"parameters":{"type":"object","properties":{"city":{"type":"string","description":"城市名"}},"required":["city"]}}}]}`)
	for _, model := range []string{"qwen3", "deepseek-v3"} {
		c, err := Open(Spec{Tokenizer: model})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(model, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.ChatPromptTokens(body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
