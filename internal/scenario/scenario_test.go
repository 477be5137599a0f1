package scenario

import (
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tollgate-dev/tollgate/internal/alert"
	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/quota"
	"github.com/tollgate-dev/tollgate/internal/sim"
)

// The scenarios of seed 000 §1–2 and seed 001 §3–4, end to end. Rates and
// answer lengths are kept modest (well under a request a second, answers
// of a few dozen tokens) so that hours of fake time stay a few seconds of
// wall time under the race detector; every rule still has several times
// its min_requests in each window.

// TestPromptInflation: a support bot's system prompt grows from 200 to
// 3000 tokens (seed 000 §1.1). Its prompts start with the session and the
// time, so the prefix cache cannot absorb the growth: every request pays
// 2800 more tokens of prefill.
func TestPromptInflation(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, setup{engine: sim.Config{Seed: 1, OutputMean: 32}})
		bot := newApp("support bot", 1)
		bot.biz, bot.template = "support", "support-bot"
		bot.rate, bot.stream, bot.system, bot.dynamic, bot.user = 0.25, true, 200, true, [2]int{10, 60}
		// 90 minutes: the TTFT baseline (the half hour before the last hour)
		// is full, the tokens-per-request one (the hour before) half full.
		e.traffic(90*time.Minute, bot)
		change := e.now()
		bot.change(func(a *app) { a.system = 3000 })
		e.traffic(15*time.Minute, bot)

		e.report(bot)
		e.check(change, []expect{
			// 2800 more tokens a request: the last hour's average passes 3×
			// the hour before about ten minutes in.
			{rule: "input_tokens_jump_biz", labels: map[string]string{"biz_line": "support"}, sev: alert.Warning, after: change, before: change + 10*time.Minute},
			{rule: "input_tokens_jump_biz", labels: map[string]string{"biz_line": "support"}, sev: alert.Critical, after: change, before: change + 15*time.Minute},
			{rule: "input_tokens_jump_template", labels: map[string]string{"template": "support-bot"}, sev: alert.Critical, after: change, before: change + 15*time.Minute},
			// 2800 tokens × 40 µs: 112 ms more before the first token.
			{rule: "ttft_p99_baseline", labels: map[string]string{"model": model}, after: change, before: change + 5*time.Minute},
		}, map[string]string{
			"tpot_p99_baseline": "a long prefill admitted into the batch stalls the decode step of every running sequence (no chunked prefill), so the slowest inter-token times grow too",
		})
	})
}

// TestOverload: a batch job of 24 workers lands on an upstream whose
// gateway limit is 12 in flight and whose engine batches 6: requests queue
// in the gateway and then in the engine (seed 000 §1.2).
func TestOverload(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, setup{
			engine: sim.Config{Seed: 2, MaxRunning: 6, DecodeBase: 30 * time.Millisecond, OutputMean: 32},
			config: func(c *config.Config) { c.Upstreams[0].MaxConcurrency = 12 },
		})
		web := newApp("web", 2)
		web.biz, web.template = "web", "assistant"
		web.rate, web.system, web.user = 0.5, 300, [2]int{10, 60}
		e.traffic(10*time.Minute, web)
		change := e.now()
		batch := newApp("batch job", 3)
		batch.biz, batch.template = "batch", "extract"
		batch.workers, batch.backoff, batch.system, batch.user = 24, time.Second, 100, [2]int{200, 600}
		e.traffic(5*time.Minute, web, batch)

		e.report(web, batch)
		e.check(change, []expect{
			{rule: "gateway_queue_p95", labels: map[string]string{"upstream": upstreamName}, sev: alert.Warning, after: change, before: change + 5*time.Minute},
			{rule: "engine_queue_p95", labels: map[string]string{"upstream": upstreamName}, sev: alert.Warning, after: change, before: change + 5*time.Minute},
		}, nil)
	})
}

// TestRunawayScript: a script loops on the API with its own key, each call
// a document of 600–900 tokens, and keeps retrying every 2 s once refused;
// its user has a daily quota of 1M tokens (seed 000 §5).
func TestRunawayScript(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, setup{
			engine: sim.Config{Seed: 3, OutputMean: 32},
			config: func(c *config.Config) {
				c.Auth.Keys = []config.Key{
					{Name: "web", Key: "sk-web-0123456789", UserID: "web-app", BizLine: "web"},
					{Name: "etl", Key: "sk-etl-0123456789", UserID: "etl-bot", BizLine: "etl"},
				}
				c.Quotas.Users = map[string]quota.Limits{"etl-bot": {DailyTokens: 1_000_000}}
			},
		})
		web := newApp("web", 4)
		web.key, web.template = "sk-web-0123456789", "assistant"
		web.rate, web.system, web.user = 0.3, 300, [2]int{10, 60}
		e.traffic(10*time.Minute, web)
		change := e.now()
		script := newApp("runaway script", 5)
		script.key, script.template = "sk-etl-0123456789", "extract"
		script.workers, script.backoff, script.system, script.user = 1, 2*time.Second, 50, [2]int{600, 900}
		e.traffic(10*time.Minute, web, script)

		e.report(web, script)
		group := map[string]string{"scope": "user:etl-bot", "limit": quota.LimitDailyTokens}
		// About 3 calls a second of ~800 tokens: 80 % after ~5 minutes,
		// the whole quota after ~6.
		e.check(change, []expect{
			{rule: "quota", labels: group, sev: alert.Warning, after: change + 3*time.Minute, before: change + 8*time.Minute},
			{rule: "quota", labels: group, sev: alert.Critical, after: change + 3*time.Minute, before: change + 9*time.Minute},
		}, nil)
	})
}

// TestVerboseModel: a new fine-tune deployed under the same name answers
// four times longer on average (seed 001 §3).
func TestVerboseModel(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, setup{engine: sim.Config{Seed: 4, OutputMean: 30}})
		api := newApp("api", 6)
		api.biz, api.template = "search", "rag"
		api.rate, api.system, api.user = 0.3, 150, [2]int{100, 400}
		// The hour before the last hour is the baseline: 90 minutes fill
		// half of it before the change, all of it by the time it matters.
		e.traffic(90*time.Minute, api)
		change := e.now()
		e.deploy(sim.Config{Seed: 5, OutputMean: 120})
		e.traffic(50*time.Minute, api)

		e.report(api)
		e.check(change, []expect{
			// The last hour's average passes 1.5× the hour before ~10
			// minutes in (then 5 minutes of `for`), 3× ~40 minutes in.
			{rule: "output_tokens_jump", labels: map[string]string{"model": model}, sev: alert.Warning, after: change + 5*time.Minute, before: change + 25*time.Minute},
			{rule: "output_tokens_jump", labels: map[string]string{"model": model}, sev: alert.Critical, after: change + 30*time.Minute, before: change + 50*time.Minute},
		}, map[string]string{
			"e2e_p99_baseline":  "four times the tokens take about four times as long",
			"ttft_p99_baseline": "the answers are not streamed, so their first token arrives with the last one: TTFT is the whole answer",
		})
	})
}

// TestMaxTokensTooLow: a release of a summarizer caps max_tokens at 24
// while its answers average 32 tokens: about half are cut (seed 001 §4).
func TestMaxTokensTooLow(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, setup{engine: sim.Config{Seed: 6, OutputMean: 32}})
		sum := newApp("summarizer", 7)
		sum.biz, sum.template = "docs", "summarize"
		sum.rate, sum.system, sum.user, sum.maxTokens = 0.5, 120, [2]int{300, 900}, 512
		e.traffic(20*time.Minute, sum)
		change := e.now()
		sum.change(func(a *app) { a.maxTokens = 24 })
		e.traffic(20*time.Minute, sum)

		e.report(sum)
		group := map[string]string{"model": model, "template": "summarize"}
		// Half the answers cut: the 15-minute share passes 10 % after ~3
		// minutes (then 5 minutes of `for`) and 30 % after ~10.
		e.check(change, []expect{
			{rule: "length_share", labels: group, sev: alert.Warning, after: change + 3*time.Minute, before: change + 12*time.Minute},
			{rule: "length_share", labels: group, sev: alert.Critical, after: change + 5*time.Minute, before: change + 16*time.Minute},
		}, nil)
	})
}

// TestSteadyRun: two applications with realistic noise — Poisson
// arrivals, rates drifting ±30 % every quarter hour, prompt and answer
// lengths drawn per request — for 2¼ hours, long enough for every
// baseline of an hour or less to be full for the last quarter hour: no
// alert at all.
func TestSteadyRun(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, setup{engine: sim.Config{Seed: 7, OutputMean: 32}})
		chat := newApp("chat", 8)
		chat.biz, chat.template = "support", "support-bot"
		chat.stream, chat.system, chat.dynamic, chat.user = true, 300, true, [2]int{10, 80}
		api := newApp("api", 9)
		api.biz, api.template = "search", "rag"
		api.system, api.user, api.maxTokens = 150, [2]int{100, 500}, 400
		drift := rand.New(rand.NewPCG(10, 11))
		for range 9 {
			chat.change(func(a *app) { a.rate = 0.15 * (0.7 + 0.6*drift.Float64()) })
			api.change(func(a *app) { a.rate = 0.2 * (0.7 + 0.6*drift.Float64()) })
			e.traffic(15*time.Minute, chat, api)
		}
		e.report(chat, api)
		e.quiet()
	})
}
