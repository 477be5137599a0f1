// Package bench builds large, realistic SQLite ledgers and times the reports
// over them. It sits beside the store it measures (store/sqlite): Gen makes
// the Records a busy gateway would hand to store.Writer, Build writes them
// through the real Store.Insert path so that rollups are built exactly as
// production builds them, and Verify checks every rollup against the ledger
// it was summed from.
//
// The 10-million-row benchmark runs only when TOLLGATE_BENCH_10M=1 (see
// bench_test.go and docs/benchmarks.md); the ordinary test suite runs a
// small ledger through the same generator and checks.
package bench

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/tollgate-dev/tollgate/internal/record"
)

// Config shapes a generated ledger. Zero fields take the defaults.
type Config struct {
	Rows  int       // ledger rows (attempts), retries included; default 10,000,000
	Days  int       // default 30
	Users int       // default 1000
	Seed  uint64    // default 1
	Start time.Time // first local midnight; default 2026-11-01 in UTC+8
	// FromDay and ToDay, if set, limit the generator to days [FromDay,
	// ToDay) of the period. Every minute is generated from its own seed,
	// so a day range yields exactly the rows the whole period has there:
	// shards of a ledger can be built apart and put together.
	FromDay, ToDay int
}

// Loc is the report time zone of generated ledgers: an operator in China,
// without DST, so day rollups are not UTC days and the hour folding of
// store.Report is exercised.
var Loc = time.FixedZone("UTC+8", 8*3600)

func (c Config) withDefaults() Config {
	if c.Rows <= 0 {
		c.Rows = 10_000_000
	}
	if c.Days <= 0 {
		c.Days = 30
	}
	if c.Users <= 0 {
		c.Users = 1000
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
	if c.Start.IsZero() {
		c.Start = time.Date(2026, 11, 1, 0, 0, 0, 0, Loc)
	}
	if c.ToDay <= 0 || c.ToDay > c.Days {
		c.ToDay = c.Days
	}
	return c
}

// model is one requested model: where it is served and what it costs.
type model struct {
	name     string
	served   [2]string // before and after switchDay: a version roll-out mid-month
	switchAt int       // day index of the roll-out; 0 = never
	upstream []string  // load-balanced; a failed attempt is retried on the next
	engine   string
	currency string
	// Prices in nanos of currency per token, i.e. per-1M-token prices × 1000,
	// so costs are exact integers as cost.Table makes them.
	in, cached, out int64
	source          record.Source // where usage comes from on success
	reasoning       bool          // part of the output is reasoning
	caches          bool          // reports prefix-cache hits
	tpot            time.Duration // mean time per output token
}

var models = []model{
	{name: "gpt-4o-mini", served: [2]string{"gpt-4o-mini-2024-07-18", "gpt-4o-mini-2025-04-14"}, switchAt: 14,
		upstream: []string{"openai"}, engine: "openai", currency: "USD", in: 150, cached: 75, out: 600,
		source: record.SourceEngine, caches: true, tpot: 12 * time.Millisecond},
	{name: "gpt-4o", served: [2]string{"gpt-4o-2024-11-20", "gpt-4o-2024-11-20"},
		upstream: []string{"openai"}, engine: "openai", currency: "USD", in: 2500, cached: 1250, out: 10000,
		source: record.SourceEngine, caches: true, tpot: 25 * time.Millisecond},
	{name: "Qwen/Qwen3-32B", served: [2]string{"Qwen/Qwen3-32B", "Qwen/Qwen3-32B"},
		upstream: []string{"vllm-a", "vllm-b"}, engine: "vllm", currency: "USD", in: 300, cached: 30, out: 1200,
		source: record.SourceEngine, reasoning: true, caches: true, tpot: 30 * time.Millisecond},
	{name: "Qwen/Qwen3-8B", served: [2]string{"Qwen/Qwen3-8B", "Qwen/Qwen3-8B-AWQ"}, switchAt: 20,
		upstream: []string{"vllm-c", "vllm-d"}, engine: "vllm", currency: "USD", in: 40, cached: 4, out: 120,
		source: record.SourceEngine, caches: true, tpot: 15 * time.Millisecond},
	{name: "deepseek-reasoner", served: [2]string{"deepseek-reasoner", "deepseek-reasoner"},
		upstream: []string{"deepseek"}, engine: "openai", currency: "CNY", in: 4000, cached: 1000, out: 16000,
		source: record.SourceEngine, reasoning: true, caches: true, tpot: 20 * time.Millisecond},
	// An engine that reports no usage: tollgate counts with the tokenizer.
	{name: "llama-3.1-8b", served: [2]string{"meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-8B-Instruct"},
		upstream: []string{"tgi-a"}, engine: "tgi", currency: "USD", in: 50, cached: 50, out: 100,
		source: record.SourceTokenizer, tpot: 10 * time.Millisecond},
}

// template is a prompt template; its fixed system prompt is the part an
// engine's prefix cache can reuse.
type template struct {
	id        string
	input     float64 // median input tokens
	output    float64 // median output tokens
	maxTokens int64
	cacheable float64 // share of the input that is the fixed prefix
	hot       float64 // share of requests sending one of a few fixed prompts
	hotPool   int
	stream    float64
	growDay   int // from this day on the prompt is 60 % longer (0 = never)
}

var kinds = []struct {
	name           string
	input, output  float64
	maxOverOut     float64 // max_tokens / median output
	cacheable, hot float64
	stream         float64
}{
	{"chat", 1800, 350, 4, 0.5, 0.01, 0.95},
	{"summarize", 3500, 250, 3, 0.15, 0.02, 0.8},
	{"classify", 600, 8, 4, 0.8, 0.35, 0.1},
	{"extract", 1500, 120, 3, 0.6, 0.05, 0.3},
	{"translate", 900, 800, 2.5, 0.3, 0.03, 0.9},
	{"rag-answer", 4000, 300, 3, 0.2, 0.02, 0.95},
	{"code-review", 2500, 600, 3, 0.4, 0.01, 0.9},
	{"faq", 700, 150, 4, 0.85, 0.5, 0.9},
}

var bizLines = []string{"search", "support", "ads", "risk", "hr", "legal", "ops", "research"}

// user is who sends requests: a fixed business line, keys, and the
// templates (each pinned to one of the user's models) their apps use.
type user struct {
	id, team, biz string
	keys          []string
	apps          []map[string]string // tags per key
	tpls          []int
	tplModel      []int
}

// Gen generates ledger Records in arrival order. It is deterministic for a
// Config and not safe for concurrent use.
type Gen struct {
	cfg     Config
	pcg     *rand.PCG
	rng     *rand.Rand // reseeded per minute
	users   []user
	cdf     []float64 // cumulative user weights (Zipf, s = 1)
	tpls    []template
	perMin  []int // rows per minute of the whole period
	minute  int   // next minute to generate
	end     int   // minute after the last one to generate
	arrival []time.Time
	pending []record.Record // the current minute's rows not yet handed out
	hexBuf  [64]byte
	temps   []float64
}

// New returns a generator for cfg.
func New(cfg Config) *Gen {
	cfg = cfg.withDefaults()
	g := &Gen{cfg: cfg, pcg: rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)}
	g.rng = rand.New(g.pcg)
	g.temps = []float64{0, 0.2, 0.7, 1}
	for i := range 40 {
		k := kinds[i%len(kinds)]
		f := 0.6 + 0.8*g.rng.Float64() // templates of a kind differ
		t := template{
			id: fmt.Sprintf("tpl-%02d-%s", i, k.name), input: k.input * f, output: k.output * (0.6 + 0.8*g.rng.Float64()),
			cacheable: k.cacheable, hot: k.hot, hotPool: 5 + g.rng.IntN(40), stream: k.stream,
		}
		ratio := k.maxOverOut
		if i == 6 || i == 17 {
			ratio = 1.4 // max_tokens set too low: the length report should flag these
		}
		t.maxTokens = int64(math.Ceil(t.output*ratio/64)) * 64
		if i == 9 {
			t.growDay = cfg.Days * 2 / 3 // a system prompt that grew: the waste report's prompt_grew
		}
		g.tpls = append(g.tpls, t)
	}
	total := 0.0
	for i := range cfg.Users {
		biz := g.rng.IntN(len(bizLines))
		u := user{id: fmt.Sprintf("u%04d", i), biz: bizLines[biz], team: "team-" + bizLines[biz]}
		for k := range 1 + g.rng.IntN(2) {
			sum := sha256.Sum256(fmt.Appendf(nil, "key/%s/%d", u.id, k))
			u.keys = append(u.keys, hex.EncodeToString(sum[:])[:12])
			var tags map[string]string
			if g.rng.IntN(2) == 0 {
				tags = map[string]string{"app": fmt.Sprintf("%s-app-%d", u.biz, g.rng.IntN(5))}
			}
			u.apps = append(u.apps, tags)
		}
		mods := []int{g.pickModel()}
		if g.rng.IntN(3) == 0 {
			mods = append(mods, g.pickModel())
		}
		for range 1 + g.rng.IntN(3) {
			u.tpls = append(u.tpls, g.rng.IntN(len(g.tpls)))
			u.tplModel = append(u.tplModel, mods[g.rng.IntN(len(mods))])
		}
		g.users = append(g.users, u)
		total += 1 / float64(i+1)
		g.cdf = append(g.cdf, total)
	}
	g.planMinutes()
	g.minute, g.end = cfg.FromDay*1440, cfg.ToDay*1440
	return g
}

// pickModel favours the cheap models, as a real fleet does.
func (g *Gen) pickModel() int {
	w := []int{35, 10, 20, 15, 10, 10}
	n := g.rng.IntN(100)
	for i, x := range w {
		if n < x {
			return i
		}
		n -= x
	}
	return 0
}

// diurnal is the relative load of a local hour: quiet nights, a morning
// and an afternoon peak, a lighter evening.
var diurnal = [24]float64{0.12, 0.08, 0.06, 0.05, 0.05, 0.08, 0.15, 0.3, 0.6, 0.9, 1, 0.95,
	0.7, 0.85, 1, 1, 0.95, 0.8, 0.55, 0.45, 0.4, 0.35, 0.25, 0.18}

// planMinutes spreads exactly Rows rows over the minutes of the period in
// proportion to the diurnal load, lighter at weekends and growing 10 %
// over the period.
func (g *Gen) planMinutes() {
	n := g.cfg.Days * 24 * 60
	w := make([]float64, n)
	total := 0.0
	for m := range n {
		day, hour := m/1440, m/60%24
		f := diurnal[hour] * (1 + 0.1*float64(day)/float64(g.cfg.Days))
		if wd := g.cfg.Start.AddDate(0, 0, day).Weekday(); wd == time.Saturday || wd == time.Sunday {
			f *= 0.4
		}
		w[m] = f
		total += f
	}
	g.perMin = make([]int, n)
	acc, prev := 0.0, 0
	for m := range n {
		acc += w[m]
		cum := int(math.Round(acc / total * float64(g.cfg.Rows)))
		g.perMin[m] = cum - prev
		prev = cum
	}
}

// Next fills buf (overwriting its Records) with up to len(buf) Records in
// arrival order and returns how many it wrote; 0 means the ledger is
// complete. What is generated does not depend on len(buf).
func (g *Gen) Next(buf []record.Record) int {
	n := 0
	for n < len(buf) {
		if len(g.pending) == 0 && !g.nextMinute() {
			break
		}
		k := copy(buf[n:], g.pending)
		g.pending = g.pending[k:]
		n += k
	}
	return n
}

// nextMinute generates the rows of the next minute with a non-zero plan.
func (g *Gen) nextMinute() bool {
	for g.minute < g.end {
		m := g.minute
		g.minute++
		c := g.perMin[m]
		if c == 0 {
			continue
		}
		g.pcg.Seed(g.cfg.Seed, uint64(m)+1)
		base := g.cfg.Start.Add(time.Duration(m) * time.Minute)
		g.arrival = g.arrival[:0]
		for range c {
			g.arrival = append(g.arrival, base.Add(time.Duration(g.rng.Int64N(int64(time.Minute)))))
		}
		slices.SortFunc(g.arrival, func(a, b time.Time) int { return a.Compare(b) })
		// The backing array is reused minute after minute: Next has
		// copied every earlier row out before this runs.
		rows := slices.Grow(g.pending[:0], c+1)[:c+1]
		n := 0
		for _, at := range g.arrival {
			if n == c {
				break // retries used up the minute's rows
			}
			// A retried request needs two of the minute's rows.
			retry := c-n >= 2 && g.rng.Float64() < 0.004
			n += g.request(rows[n:], at, m/60, retry)
		}
		g.pending = rows[:n]
		return true
	}
	return false
}

func (g *Gen) hex(n int) string {
	for i := 0; i < n; i += 16 {
		v := g.rng.Uint64()
		for j := 0; j < 16 && i+j < n; j++ {
			g.hexBuf[i+j] = "0123456789abcdef"[v&15]
			v >>= 4
		}
	}
	return string(g.hexBuf[:n])
}

func (g *Gen) pickUser() *user {
	x := g.rng.Float64() * g.cdf[len(g.cdf)-1]
	i, _ := slices.BinarySearch(g.cdf, x)
	return &g.users[min(i, len(g.users)-1)]
}

// lognormal returns median × e^(σ·N(0,1)), at least 1.
func (g *Gen) lognormal(median, sigma float64) int64 {
	return max(1, int64(median*math.Exp(sigma*g.rng.NormFloat64())))
}

// request writes one request into out: one row, or two when the first
// attempt fails and is retried on the model's next upstream. It returns
// the rows written and always consumes one arrival.
func (g *Gen) request(out []record.Record, at time.Time, hour int, retry bool) int {
	u := g.pickUser()
	ti := g.rng.IntN(len(u.tpls))
	t, m := &g.tpls[u.tpls[ti]], &models[u.tplModel[ti]]
	day := int(at.Sub(g.cfg.Start) / (24 * time.Hour))
	ki := 0
	if len(u.keys) > 1 && g.rng.IntN(5) == 0 {
		ki = 1
	}
	// A conversation lasts within an hour; a user has a few at a time.
	// Deriving it from the hour keeps minutes independent of each other.
	turn := 1 + g.rng.IntN(8)
	// The ids the gateway makes, from the arrival: time-ordered keys that
	// grow the ledger's indexes at their right edge, as in production.
	id := record.NewRequestID(at, g.rng.Uint64())
	trace := record.NewTraceID(at, g.rng.Uint32(), g.rng.Uint64())
	r := &out[0]
	*r = record.Record{
		RequestID: id, LogicalRequestID: id, Attempt: 1, TraceID: trace, SpanID: g.hex(16),
		UserID: u.id, KeyID: u.keys[ki], Team: u.team, BizLine: u.biz, SessionID: session(u.id, hour, g.rng.IntN(3)),
		TemplateID: t.id, Tags: u.apps[ki], Endpoint: "chat", Model: m.name,
		Stream: g.rng.Float64() < t.stream, Arrival: at,
		MaxTokens: &t.maxTokens, Temperature: &g.temps[u.tpls[ti]%len(g.temps)],
	}
	if turn%3 == 0 {
		// An agent's customers: a third of the requests name an end user
		// (derived from draws already made, so the stream is unchanged).
		r.EndUser = fmt.Sprintf("%s/customer-%d", u.id, (hour+turn)%40)
	}
	r.IncludeUsage = r.Stream && g.rng.IntN(10) < 7
	served := m.served[0]
	if m.switchAt > 0 && day >= m.switchAt {
		served = m.served[1]
	}

	// The prompt: a few fixed ones per template (duplicates an exact-match
	// cache could answer) or a unique one.
	inMedian := t.input
	if t.growDay > 0 && day >= t.growDay {
		inMedian *= 1.6
	}
	input := g.lognormal(inMedian, 0.35)
	if g.rng.Float64() < t.hot {
		k := g.rng.IntN(t.hotPool)
		sum := sha256.Sum256(fmt.Appendf(nil, "%s/%d/%v", t.id, k, inMedian != t.input))
		r.PromptSHA256 = hex.EncodeToString(sum[:])
		input = int64(inMedian) + int64(k) // the same prompt has the same length
	} else {
		r.PromptSHA256 = g.hex(64)
	}
	r.PromptBytes = input * 4
	r.Messages = 1 + 2*turn
	r.RequestBytes = r.PromptBytes + 180

	r.Marks.AuthDone = 150*time.Microsecond + time.Duration(g.rng.IntN(100))*time.Microsecond
	r.Marks.Admitted = r.Marks.AuthDone + time.Duration(g.rng.ExpFloat64()*float64(2*time.Millisecond))
	rows := 1
	ui := g.rng.IntN(len(m.upstream))
	if retry {
		// The first attempt fails with 503 and is retried elsewhere.
		*r = g.finishFailed(r, m, ui, "upstream_error")
		g.sample(r)
		second := &out[1]
		*second = *r
		second.RequestID = id + ".a2"
		second.Attempt, second.Retries, second.SpanID = 2, 1, g.hex(16)
		second.ErrorType, second.ErrorMessage, second.Status, second.UpstreamStatus, second.ClientDisconnect = "", "", 0, 0, false
		second.Usage, second.Cost, second.Marks.End = record.Usage{}, record.Cost{}, 0
		second.Marks.UpstreamSent, second.Marks.UpstreamHeaders, second.ConnectWait = 0, 0, 0
		ui = (ui + 1) % len(m.upstream)
		r, rows = second, 2
	}
	r.Upstream, r.Engine, r.ServedModel = m.upstream[ui], m.engine, served

	// 2 % of requests fail in one of the ways a gateway sees.
	if x := g.rng.Float64(); !retry && x < failCum[len(failCum)-1] {
		i, _ := slices.BinarySearch(failCum, x)
		*r = g.finishFailed(r, m, ui, failures[min(i, len(failures)-1)])
		g.sample(r)
		return rows
	}

	out1 := g.lognormal(t.output, 0.6)
	r.FinishReason = "stop"
	if out1 >= t.maxTokens {
		out1, r.FinishReason = t.maxTokens, "length"
	}
	g.timing(r, m, input, out1)
	r.Status, r.UpstreamStatus = 200, 200
	r.Usage = g.usage(m, t, input, out1)
	r.Cost = rate(m, r.Usage)
	r.ContentChunks = int(out1)
	r.FirstChunkBytes, r.ContentBytes = 4, out1*4
	r.ResponseBytes = out1 * 4
	if r.Stream {
		r.ResponseBytes = out1 * 160 // one SSE event per token
	}
	g.sample(r)
	return rows
}

func session(user string, hour, k int) string {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s/%d/%d", user, hour, k)
	return fmt.Sprintf("sess_%016x", h.Sum64())
}

// failures are how the 2 % of failed requests fail, with cumulative shares
// of all requests.
var (
	failures = []string{"rate_limited", "upstream_error", "first_token_timeout", "client_disconnect", "upstream_reset", "upstream_400"}
	failCum  = []float64{0.004, 0.009, 0.012, 0.017, 0.019, 0.02}
)

// timing sets the marks of an answer of out tokens to input tokens.
func (g *Gen) timing(r *record.Record, m *model, input, out int64) {
	mk := &r.Marks
	mk.UpstreamSent = mk.Admitted + 300*time.Microsecond
	// Mostly a pooled connection; now and then a new TLS one.
	r.ConnectWait = 150*time.Microsecond + time.Duration(g.rng.IntN(300))*time.Microsecond
	if g.rng.IntN(50) == 0 {
		r.ConnectWait += 20*time.Millisecond + time.Duration(g.rng.IntN(30))*time.Millisecond
	}
	queue := time.Duration(g.rng.ExpFloat64() * float64(25*time.Millisecond))
	prefill := time.Duration(input) * 40 * time.Microsecond
	tpot := time.Duration(float64(m.tpot) * (0.7 + 0.6*g.rng.Float64()))
	decode := time.Duration(out-1) * tpot
	first := mk.UpstreamSent + r.ConnectWait + queue + prefill
	last := first + decode
	if r.Stream {
		mk.UpstreamHeaders = mk.UpstreamSent + r.ConnectWait + 2*time.Millisecond
		mk.FirstUpstreamToken, mk.LastUpstreamToken = first, last
		mk.FirstClientToken, mk.LastToken = first+150*time.Microsecond, last+150*time.Microsecond
		r.ClientWrite, r.ClientWriteTail = time.Duration(out)*3*time.Microsecond, 100*time.Microsecond
		mk.End = last + time.Millisecond
	} else {
		// The whole body arrives at once, as the gateway marks it.
		mk.UpstreamHeaders, mk.FirstUpstreamToken, mk.LastUpstreamToken = last, last, last
		r.ClientWrite, r.ClientWriteTail = 200*time.Microsecond, 200*time.Microsecond
		mk.End = last + 300*time.Microsecond
	}
	// Engines that say how they spent the time: vLLM through its OTLP
	// spans, TGI in response headers.
	switch m.engine {
	case "vllm":
		r.EngineTiming = &record.EngineTiming{Signal: "vllm-span", Queue: queue, TTFT: queue + prefill, Prefill: prefill,
			Decode: decode, E2E: queue + prefill + decode, PromptTokens: input, CompletionTokens: out}
	case "tgi":
		r.EngineTiming = &record.EngineTiming{Signal: "tgi-headers", Queue: queue, Inference: prefill + decode, Decode: decode,
			Prefill: prefill, TTFT: queue + prefill, PromptTokens: input, CompletionTokens: out}
	}
}

// usage is what the engine (or the tokenizer) reports for a success.
func (g *Gen) usage(m *model, t *template, input, out int64) record.Usage {
	u := record.Usage{InputTokens: input, OutputTokens: out, Source: m.source}
	if m.caches && g.rng.IntN(10) < 8 {
		// Prefix caches reuse whole blocks of the fixed part.
		u.CachedInputTokens = int64(float64(input)*t.cacheable*(0.6+0.4*g.rng.Float64())) &^ 15
	}
	if m.reasoning {
		u.ReasoningTokens = out * int64(30+g.rng.IntN(40)) / 100
	}
	return u
}

// rate prices usage as a cost.Table entry with per-token nanos would.
func rate(m *model, u record.Usage) record.Cost {
	n := (u.InputTokens-u.CachedInputTokens)*m.in + u.CachedInputTokens*m.cached + u.OutputTokens*m.out
	return record.Cost{Nanos: n, Currency: m.currency, PriceVersion: "2026-11-01/" + m.name}
}

// finishFailed ends r with the error kind, as the gateway records it.
func (g *Gen) finishFailed(r *record.Record, m *model, ui int, kind string) record.Record {
	f := *r
	mk := &f.Marks
	f.ErrorType = kind
	f.Usage.Source = record.SourceNone
	served := f.ServedModel
	f.ServedModel = "" // only a response names the served model
	switch kind {
	case "rate_limited":
		f.Status, f.ErrorMessage = 429, "user quota exceeded"
		f.Upstream, f.Engine = "", ""
		mk.End = mk.Admitted + 50*time.Microsecond
		return f // never reached an upstream
	case "upstream_error", "upstream_400":
		f.ErrorType = record.ErrUpstreamStatus
		f.Status, f.UpstreamStatus, f.ErrorMessage = 503, 503, "upstream answered 503"
		if kind == "upstream_400" {
			f.Status, f.UpstreamStatus, f.ErrorMessage = 400, 400, "upstream answered 400"
		}
		mk.UpstreamSent = mk.Admitted + 300*time.Microsecond
		mk.UpstreamHeaders = mk.UpstreamSent + 30*time.Millisecond
		mk.End = mk.UpstreamHeaders + time.Millisecond
		f.ConnectWait = 300 * time.Microsecond
	case "first_token_timeout":
		f.Status, f.UpstreamStatus, f.ErrorMessage = 504, 200, "no first token within 30s"
		mk.UpstreamSent = mk.Admitted + 300*time.Microsecond
		mk.UpstreamHeaders = mk.UpstreamSent + 40*time.Millisecond
		mk.End = mk.UpstreamSent + 30*time.Second
		f.ConnectWait = 300 * time.Microsecond
	case "client_disconnect", "upstream_reset":
		// Part of the answer was streamed: output is counted from the
		// chunks (or the tokenizer), input only by a tokenizer.
		f.Stream = true
		out := 1 + g.rng.Int64N(200)
		g.timing(&f, m, f.PromptBytes/4, out)
		f.EngineTiming = nil // an engine reports its timing only at the end
		f.UpstreamStatus, f.ContentChunks, f.ContentBytes, f.FirstChunkBytes = 200, int(out), out*4, 4
		f.Usage = record.Usage{OutputTokens: out, Source: record.SourceChunks}
		if m.source == record.SourceTokenizer {
			f.Usage = record.Usage{InputTokens: f.PromptBytes / 4, OutputTokens: out, Source: record.SourceTokenizer}
		}
		f.Cost = rate(m, f.Usage)
		f.ServedModel = served
		if kind == "client_disconnect" {
			f.Status, f.ClientDisconnect, f.ErrorMessage = record.StatusClientClosed, true, "client closed the connection"
		} else {
			f.Status, f.ErrorMessage = 502, "upstream broke the stream"
		}
	}
	f.Upstream, f.Engine = m.upstream[ui], m.engine
	return f
}

// sample decides, as the gateway does with its default config (10 % of
// normal requests, every failure, every request of 10 s or more), whether
// r keeps its token timeline: the first, every 10th and the last chunk.
func (g *Gen) sample(r *record.Record) {
	h := fnv.New32a()
	h.Write([]byte(r.RequestID)) //nolint:errcheck // hash writes never fail
	ok := r.ErrorType == "" && r.Status >= 200 && r.Status < 300
	r.Sampled = !ok || r.Marks.End >= 10*time.Second || h.Sum32()%10000 < 1000
	r.Timeline = nil
	if !r.Sampled || !r.Stream || r.ContentChunks == 0 {
		return
	}
	n := r.ContentChunks
	step := time.Duration(0)
	if n > 1 {
		step = (r.Marks.LastToken - r.Marks.FirstClientToken) / time.Duration(n-1)
	}
	for i := 0; i < n; i += 10 {
		r.Timeline = append(r.Timeline, record.TimelinePoint{Index: i, Offset: r.Marks.FirstClientToken + time.Duration(i)*step})
	}
	if (n-1)%10 != 0 {
		r.Timeline = append(r.Timeline, record.TimelinePoint{Index: n - 1, Offset: r.Marks.LastToken})
	}
}

// Records returns n finished Records of one generated day, in arrival
// order, each with its own request id: a busy gateway's traffic, for the
// benchmarks of the ledger's path into a store (the sampled ones keep a
// token timeline, as with the default sampling: 10 % of normal requests,
// every failed or slow one).
func Records(n int) ([]*record.Record, error) {
	g := New(Config{Rows: n + n/10 + 1000, Days: 1, Users: 1000})
	buf := make([]record.Record, n)
	if got := g.Next(buf); got < n {
		return nil, fmt.Errorf("bench: the generator made %d records; want %d", got, n)
	}
	out := make([]*record.Record, n)
	for i := range buf {
		buf[i].Finish()
		out[i] = &buf[i]
	}
	return out, nil
}

// Live returns the Records of Records(n) as a gateway under load writes
// them: the same mix of users, templates, models and prompts, arriving
// rate a second from start in the same order. A day's Records spread over
// the day put each in rollup rows of its own; at a live rate the rows of
// a few seconds share their minute, hour and day, which is what the
// ledger meets at the rates its benchmarks measure.
func Live(n int, start time.Time, rate float64) ([]*record.Record, error) {
	recs, err := Records(n)
	if err != nil {
		return nil, err
	}
	for i, r := range recs {
		r.Arrival = start.Add(time.Duration(float64(i) / rate * float64(time.Second)))
		r.Finish()
	}
	return recs, nil
}
