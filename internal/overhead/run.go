package overhead

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	_ "modernc.org/sqlite" // reads the B arm's ledger

	"github.com/tollgate-dev/tollgate/internal/childproc"
)

// Arms, in their nominal order; each round runs them shuffled. BC, B on
// a ClickHouse store, joins them when Options.ClickHouse names a server.
var Arms = []string{"D", "A", "B", "B0"}

// arms are the run's arms in their nominal order.
func (o *Options) arms() []string {
	if o.ClickHouse == "" {
		return Arms
	}
	return append(append([]string{}, Arms...), "BC")
}

// Options configure a run.
type Options struct {
	Exe     string        // the tollgate binary, re-executed for the mock and the arms
	Env     []string      // added to the children's environment
	Dir     string        // work directory: configs, ledgers, logs
	Rounds  int           // ≥ 1
	Phase   time.Duration // each scenario's length, per arm and round
	Warmup  time.Duration // unmeasured load before an arm's scenarios
	Settle  time.Duration // pause before the "after" memory reading
	Rates   []float64     // JSON fixed rates, requests/s
	Workers int           // closed loops at saturation
	SSE     []int         // stream concurrencies
	Mock    MockOptions
	// ClickHouse, if set, is the HTTP URL of a ClickHouse server: arm BC
	// is then run too, B with store.backend clickhouse there (a database
	// of its own per round, dropped after its ledger is checked), so that
	// both stores are measured in the same rounds. The server's own CPU is
	// not the arm's: run it on the load driver's CPU (0).
	ClickHouse string
	Seed       uint64    // arm order; 0: from the clock
	Raw        io.Writer // JSONL, one line per round × arm × scenario; nil: none
	Progress   io.Writer // one line per step; nil: quiet
}

func (o *Options) validate() error {
	var errs []error
	if o.Exe == "" {
		errs = append(errs, errors.New("the tollgate binary is unknown"))
	}
	if o.Rounds < 1 {
		errs = append(errs, fmt.Errorf("--rounds: must be at least 1; got %d", o.Rounds))
	}
	if o.Phase <= 0 {
		errs = append(errs, fmt.Errorf("--duration: must be positive; got %s", o.Phase))
	}
	if len(o.Rates) == 0 {
		errs = append(errs, errors.New("--rates: at least one rate"))
	}
	for _, r := range o.Rates {
		if r <= 0 || r > 100000 {
			errs = append(errs, fmt.Errorf("--rates: each rate must be in (0, 100000] requests/s; got %g", r))
		}
	}
	if o.Workers < 1 {
		errs = append(errs, fmt.Errorf("--workers: must be at least 1; got %d", o.Workers))
	}
	for _, c := range o.SSE {
		if c < 1 {
			errs = append(errs, fmt.Errorf("--sse: each concurrency must be at least 1; got %d", c))
		}
	}
	if o.Mock.Frames < 2 {
		errs = append(errs, fmt.Errorf("--frames: must be at least 2; got %d", o.Mock.Frames))
	}
	if o.ClickHouse != "" {
		if u, err := url.Parse(o.ClickHouse); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("--clickhouse: want the HTTP interface's URL, http://host:port; got %q", redactURL(o.ClickHouse)))
		}
	}
	if o.Mock.TTFT < 0 || o.Mock.ITL < 0 {
		errs = append(errs, errors.New("--ttft, --itl: must not be negative"))
	}
	return errors.Join(errs...)
}

// Run starts the mock, then per round fresh A, B and B0 processes, drives
// every arm in a shuffled order, stops the arms (B by SIGTERM, so its
// ledger is flushed) and checks B's ledger against what the mock sent.
func Run(ctx context.Context, o Options) (*Report, error) {
	if runtime.GOOS != "linux" {
		return nil, errors.New("bench overhead needs Linux: it reads /proc for CPU time and memory and pins processes to CPUs")
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	if o.Seed == 0 {
		o.Seed = uint64(time.Now().UnixNano())
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	rep := &Report{Machine: machine(), Settings: settingsOf(o)}

	// One CPU for the system under test, the other for the load driver
	// and the mock.
	loadCPU, sutCPU := -1, -1
	if affinitySupported && rep.Machine.CPUs >= 2 {
		restore, err := pinSelf(0)
		if err != nil {
			rep.Machine.Pinning = "none: " + err.Error()
		} else {
			defer restore()
			loadCPU, sutCPU = 0, 1
			rep.Machine.Pinning = "sched_setaffinity: arms on CPU 1 (GOMAXPROCS=1), load driver and mock on CPU 0"
		}
	} else {
		rep.Machine.Pinning = "none: fewer than 2 CPUs"
	}

	mockAddr, err := childproc.FreeAddr()
	if err != nil {
		return nil, err
	}
	mock, err := startProc(ctx, "mock", o.Exe, []string{"bench", "overhead", "--role", "mock", "--listen", mockAddr,
		"--frames", fmt.Sprint(o.Mock.Frames), "--ttft", o.Mock.TTFT.String(), "--itl", o.Mock.ITL.String()},
		o.Env, mockAddr, filepath.Join(o.Dir, "mock.log"), loadCPU)
	if err != nil {
		return nil, err
	}
	defer func() { _ = mock.Stop(10 * time.Second) }()

	rng := rand.New(rand.NewPCG(o.Seed, 0x0bead))
	var seq atomic.Int64
	for r := 1; r <= o.Rounds; r++ {
		rr, err := runRound(ctx, &o, r, mock, sutCPU, rng, &seq)
		if err != nil {
			return nil, fmt.Errorf("round %d: %w", r, err)
		}
		rep.Rounds = append(rep.Rounds, rr)
	}
	rep.Machine.LoadAvgEnd = loadavg()
	rep.summarise()
	return rep, nil
}

// Round is one round's results.
type Round struct {
	N         int                   `json:"round"`
	Order     []string              `json:"order"`
	Arms      map[string]*ArmResult `json:"arms"`
	Integrity Integrity             `json:"integrity"`
}

// ArmResult is one arm's scenarios in one round.
type ArmResult struct {
	JSON       []JSONResult `json:"json"`
	Saturation SatResult    `json:"saturation"`
	SSE        []SSEResult  `json:"sse"`
	Memory     *Mem         `json:"memory,omitempty"` // not for D
}

// JSONResult is a fixed-rate JSON scenario. Latencies are in ms.
type JSONResult struct {
	Rate      float64 `json:"rate"`
	Sent      int     `json:"sent"`
	OK        int     `json:"ok"`
	Errors    int     `json:"errors"`
	Dropped   int     `json:"dropped"`
	FirstErr  string  `json:"first_error,omitempty"`
	P50       float64 `json:"p50_ms"`
	P99       float64 `json:"p99_ms"`
	CPUPerReq float64 `json:"cpu_us_per_req,omitempty"` // the arm process's, not for D
	Others    float64 `json:"sut_cpu_others_pct"`       // busy share of the arms' CPU taken by other processes
}

// SatResult is the saturation scenario.
type SatResult struct {
	Workers   int     `json:"workers"`
	OK        int     `json:"ok"`
	Errors    int     `json:"errors"`
	FirstErr  string  `json:"first_error,omitempty"`
	RPS       float64 `json:"rps"`
	P50       float64 `json:"p50_ms"`
	P99       float64 `json:"p99_ms"`
	CPUPerReq float64 `json:"cpu_us_per_req,omitempty"`
	Others    float64 `json:"sut_cpu_others_pct"`
}

// SSEResult is a streaming scenario. Times are in ms.
type SSEResult struct {
	Conc       int     `json:"concurrency"`
	Streams    int     `json:"streams"`
	OK         int     `json:"ok"`
	Errors     int     `json:"errors"`
	FirstErr   string  `json:"first_error,omitempty"`
	FramesLost int     `json:"frames_lost"`
	TTFTP50    float64 `json:"ttft_p50_ms"`
	TTFTP99    float64 `json:"ttft_p99_ms"`
	ITLP50     float64 `json:"itl_p50_ms"`
	ITLP99     float64 `json:"itl_p99_ms"`
	CPUPerReq  float64 `json:"cpu_us_per_stream,omitempty"`
	Others     float64 `json:"sut_cpu_others_pct"`
}

// Mem is an arm process's resident memory in MiB: after start-up, the
// most seen under load, and after the load (Settle later).
type Mem struct {
	Idle  float64 `json:"idle_mib"`
	Load  float64 `json:"load_mib"`
	After float64 `json:"after_mib"`
}

// Integrity compares B's ledger with what the mock sent through B.
type Integrity struct {
	MockRequests     int64 `json:"mock_requests"`
	LedgerRows       int64 `json:"ledger_rows"`
	RowsLost         int64 `json:"rows_lost"`
	MockPrompt       int64 `json:"mock_prompt_tokens"`
	LedgerInput      int64 `json:"ledger_input_tokens"`
	MockCompletion   int64 `json:"mock_completion_tokens"`
	LedgerOutput     int64 `json:"ledger_output_tokens"`
	TokensMatch      bool  `json:"tokens_match"`
	B0LedgerRows     int64 `json:"b0_ledger_rows"` // accounting off: must be 0
	ClientOKRequests int64 `json:"client_ok_requests"`
	// BC's ledger in ClickHouse against what the mock sent through BC,
	// when that arm ran.
	BC *StoreIntegrity `json:"bc,omitempty"`
}

// StoreIntegrity compares one arm's ledger with the mock's counts.
type StoreIntegrity struct {
	MockRequests   int64 `json:"mock_requests"`
	LedgerRows     int64 `json:"ledger_rows"`
	RowsLost       int64 `json:"rows_lost"`
	MockPrompt     int64 `json:"mock_prompt_tokens"`
	LedgerInput    int64 `json:"ledger_input_tokens"`
	MockCompletion int64 `json:"mock_completion_tokens"`
	LedgerOutput   int64 `json:"ledger_output_tokens"`
	TokensMatch    bool  `json:"tokens_match"`
}

func runRound(ctx context.Context, o *Options, r int, mock *proc, sutCPU int, rng *rand.Rand, seq *atomic.Int64) (*Round, error) {
	dir := filepath.Join(o.Dir, fmt.Sprintf("round%d", r))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	procs := map[string]*proc{}
	defer func() {
		for _, p := range procs {
			_ = p.Stop(time.Minute)
		}
	}()
	sutEnv := append(append([]string{}, o.Env...), "GOMAXPROCS=1")
	sut := []string{"A", "B", "B0"}
	chDB := ""
	if o.ClickHouse != "" {
		sut = append(sut, "BC")
		chDB = fmt.Sprintf("tollgate_overhead_%d_%d", os.Getpid(), r)
		defer func() { _ = chExec(context.Background(), o.ClickHouse, "DROP DATABASE IF EXISTS "+chDB, nil) }()
	}
	for _, arm := range sut {
		addr, err := childproc.FreeAddr()
		if err != nil {
			return nil, err
		}
		var args []string
		if arm == "A" {
			args = []string{"bench", "overhead", "--role", "bare", "--listen", addr, "--upstream", "http://" + mock.Addr}
		} else {
			cfg := filepath.Join(dir, arm+".yml")
			st := storeSection{sqlite: filepath.Join(dir, arm+".db"), accounting: arm != "B0"}
			if arm == "BC" {
				st.clickhouse, st.database = o.ClickHouse, chDB
			}
			if err := os.WriteFile(cfg, []byte(serveConfig(addr, "http://"+mock.Addr+"/v1", st)), 0o644); err != nil {
				return nil, err
			}
			args = []string{"serve", "--config", cfg}
		}
		p, err := startProc(ctx, arm, o.Exe, args, sutEnv, addr, filepath.Join(dir, arm+".log"), sutCPU)
		if err != nil {
			return nil, err
		}
		procs[arm] = p
	}

	order := o.arms()
	rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	round := &Round{N: r, Order: order, Arms: map[string]*ArmResult{}}
	fmt.Fprintf(o.Progress, "round %d/%d: order %s\n", r, o.Rounds, strings.Join(order, " "))
	for _, arm := range order {
		base, pid := "http://"+mock.Addr, 0
		if p := procs[arm]; p != nil {
			base, pid = "http://"+p.Addr, p.Pid()
		}
		t := target{base: base, tag: fmt.Sprintf("%s/%d", arm, r)}
		ar, err := runArm(ctx, o, t, pid, sutCPU, seq)
		if err != nil {
			return nil, fmt.Errorf("arm %s: %w", arm, err)
		}
		round.Arms[arm] = ar
		writeRaw(o.Raw, r, arm, ar)
		fmt.Fprintf(o.Progress, "  %-2s %s\n", arm, ar.brief())
	}

	// Stop the arms; B flushes its ledger on SIGTERM before it exits.
	for _, arm := range sut {
		p := procs[arm]
		delete(procs, arm)
		if err := p.Stop(2 * time.Minute); err != nil {
			return nil, err
		}
	}
	in, err := checkLedger(ctx, mock, r, dir, round.Arms["B"])
	if err != nil {
		return nil, err
	}
	if chDB != "" {
		if in.BC, err = checkClickHouse(ctx, mock, r, o.ClickHouse, chDB); err != nil {
			return nil, err
		}
	}
	round.Integrity = in
	writeLine(o.Raw, r, "B", "integrity", in)
	fmt.Fprintf(o.Progress, "  integrity: %d rows for %d requests sent by the mock, tokens match %v, B0 rows %d\n",
		in.LedgerRows, in.MockRequests, in.TokensMatch, in.B0LedgerRows)
	if bc := in.BC; bc != nil {
		fmt.Fprintf(o.Progress, "  integrity BC (ClickHouse): %d rows for %d requests sent by the mock, tokens match %v\n",
			bc.LedgerRows, bc.MockRequests, bc.TokensMatch)
	}
	return round, nil
}

// storeSection says which store an arm writes: B's SQLite file, B0's
// nothing (accounting off), or BC's ClickHouse database (its write-ahead
// queue beside where the SQLite file would be).
type storeSection struct {
	sqlite               string
	accounting           bool
	clickhouse, database string
}

func (s storeSection) yaml() string {
	durability := "queue"
	if !s.accounting {
		durability = "off"
	}
	if s.clickhouse != "" {
		return fmt.Sprintf(`store:
  backend: clickhouse
  clickhouse: {url: %q, database: %s}
  queue: {dir: %q}
  durability: %s
`, s.clickhouse, s.database, s.sqlite+".queue", durability)
	}
	return fmt.Sprintf(`store:
  sqlite: {path: %q}
  durability: %s
`, s.sqlite, durability)
}

// serveConfig is the B (accounting on), B0 (store.durability: off) or BC
// (ClickHouse) configuration: one upstream, the mock; prices so every
// request is rated; no OTLP listeners or engine scraping, which the mock
// lacks. ClickHouse's store takes its batching defaults (1000 rows, 1 s).
func serveConfig(listen, upstream string, st storeSection) string {
	return fmt.Sprintf(`# written by tollgate bench overhead
listen: %q
shutdown_grace: 30s
log: {level: warn}
%supstreams:
  - {name: mock, url: %q, engine: openai}
prices:
  - {model: bench-model, currency: USD, input: 0.15, cached_input: 0.075, output: 0.60}
otlp: {http_listen: "", grpc_listen: ""}
engine_metrics: {interval: 0s}
`, listen, st.yaml(), upstream)
}

// runArm drives one arm through every scenario; pid is the arm's process
// (0 for D, which has none), pinned to sutCPU (−1: not pinned).
func runArm(ctx context.Context, o *Options, t target, pid, sutCPU int, seq *atomic.Int64) (*ArmResult, error) {
	ar := &ArmResult{}
	var sampler *memSampler
	if pid != 0 {
		rss, _, err := memory(pid)
		if err != nil {
			return nil, err
		}
		ar.Memory = &Mem{Idle: mib(rss)}
		sampler = sampleMemory(pid)
	}
	if o.Warmup > 0 {
		saturate(ctx, t, min(o.Workers, 8), o.Warmup, seq)
	}
	for _, rate := range o.Rates {
		m := startMeter(pid, sutCPU)
		l := fixedRate(ctx, t, rate, o.Phase, seq)
		drained(ctx, t.base)
		per, others := m.stop(l.sent)
		ar.JSON = append(ar.JSON, JSONResult{Rate: rate, Sent: l.sent, OK: l.ok, Errors: l.errs, Dropped: l.dropped, FirstErr: l.firstErr,
			P50: ms(pct(l.lat, 50)), P99: ms(pct(l.lat, 99)), CPUPerReq: per, Others: others})
	}
	m := startMeter(pid, sutCPU)
	s := saturate(ctx, t, o.Workers, o.Phase, seq)
	drained(ctx, t.base)
	per, others := m.stop(s.sent)
	ar.Saturation = SatResult{Workers: o.Workers, OK: s.ok, Errors: s.errs, FirstErr: s.firstErr,
		RPS: float64(s.ok) / s.elapsed.Seconds(), P50: ms(pct(s.lat, 50)), P99: ms(pct(s.lat, 99)), CPUPerReq: per, Others: others}
	for _, c := range o.SSE {
		m := startMeter(pid, sutCPU)
		st := streamPhase(ctx, t, c, o.Phase, o.Mock, seq)
		drained(ctx, t.base)
		per, others := m.stop(st.started)
		ar.SSE = append(ar.SSE, SSEResult{Conc: c, Streams: st.started, OK: st.ok, Errors: st.errs, FirstErr: st.firstErr, FramesLost: st.framesLost,
			TTFTP50: ms(pct(st.ttft, 50)), TTFTP99: ms(pct(st.ttft, 99)), ITLP50: ms(pct(st.itl, 50)), ITLP99: ms(pct(st.itl, 99)),
			CPUPerReq: per, Others: others})
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if sampler != nil {
		ar.Memory.Load = mib(sampler.stop())
		// A measurement pause: what the process gives back once idle.
		time.Sleep(o.Settle)
		rss, _, err := memory(pid)
		if err != nil {
			return nil, err
		}
		ar.Memory.After = mib(rss)
	}
	return ar, nil
}

// meter measures a scenario: the arm's CPU time per request, and how
// busy other processes kept the arms' CPU meanwhile — on a shared machine
// the figure that says which scenarios were disturbed.
type meter struct {
	pid, cpu  int
	arm, busy time.Duration
	at        time.Time
}

func startMeter(pid, cpu int) meter {
	m := meter{pid: pid, cpu: cpu, at: time.Now()}
	if pid != 0 {
		m.arm, _ = cpuTime(pid)
	}
	if cpu >= 0 {
		m.busy, _ = cpuBusy(cpu)
	}
	return m
}

// drained waits (up to 10 s) until an arm with a ledger has shipped every
// record it queued, so that the CPU spent shipping a scenario's records
// to SQLite (asynchronous, in batches) counts in that scenario and not
// in the next. Arms without one (no tollgate_wal_unshipped_entries on
// /metrics) return at once.
func drained(ctx context.Context, base string) {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		n, ok := unshipped(ctx, base)
		if !ok || n == 0 {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// unshipped reads tollgate_wal_unshipped_entries from base's /metrics.
func unshipped(ctx context.Context, base string) (float64, bool) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return 0, false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, false
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "tollgate_wal_unshipped_entries "); ok {
			n, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return n, err == nil
		}
	}
	return 0, false
}

// stop returns the arm's CPU µs per request (0 for D) and the share of
// the arms' CPU, in percent of the wall time, that other processes used.
func (m meter) stop(n int) (perReq, othersPct float64) {
	wall := time.Since(m.at)
	var arm time.Duration
	if m.pid != 0 {
		now, _ := cpuTime(m.pid)
		arm = now - m.arm
		if n > 0 {
			perReq = float64(arm.Microseconds()) / float64(n)
		}
	}
	if m.cpu >= 0 {
		busy, _ := cpuBusy(m.cpu)
		othersPct = max(0, float64(busy-m.busy-arm)/float64(wall)*100)
	}
	return perReq, othersPct
}

func mib(kib int64) float64 { return float64(kib) / 1024 }

// memSampler reads an arm's resident set every 100 ms and keeps the most.
type memSampler struct {
	quit chan struct{}
	done chan struct{}
	peak int64
}

func sampleMemory(pid int) *memSampler {
	m := &memSampler{quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(m.done)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			if rss, _, err := memory(pid); err == nil {
				m.peak = max(m.peak, rss)
			}
			select {
			case <-m.quit:
				return
			case <-t.C:
			}
		}
	}()
	return m
}

func (m *memSampler) stop() int64 {
	close(m.quit)
	<-m.done
	return m.peak
}

// checkLedger counts B's ledger rows and token sums and compares them with
// the mock's counts under B's tag; B0's ledger must be empty.
func checkLedger(ctx context.Context, mock *proc, r int, dir string, b *ArmResult) (Integrity, error) {
	var in Integrity
	sent, err := mockSent(ctx, mock.Addr, fmt.Sprintf("B/%d", r))
	if err != nil {
		return in, err
	}
	in.MockRequests, in.MockPrompt, in.MockCompletion = sent.Requests, sent.PromptTokens, sent.CompletionTokens
	if in.LedgerRows, in.LedgerInput, in.LedgerOutput, err = ledgerSums(ctx, filepath.Join(dir, "B.db")); err != nil {
		return in, err
	}
	if in.B0LedgerRows, _, _, err = ledgerSums(ctx, filepath.Join(dir, "B0.db")); err != nil {
		return in, err
	}
	in.RowsLost = max(0, in.MockRequests-in.LedgerRows)
	in.TokensMatch = in.MockPrompt == in.LedgerInput && in.MockCompletion == in.LedgerOutput
	if b != nil {
		for _, j := range b.JSON {
			in.ClientOKRequests += int64(j.OK)
		}
		in.ClientOKRequests += int64(b.Saturation.OK)
		for _, s := range b.SSE {
			in.ClientOKRequests += int64(s.OK)
		}
	}
	return in, nil
}

func mockSent(ctx context.Context, addr, tag string) (Sent, error) {
	var s Sent
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/stats?tag="+tag, nil)
	if err != nil {
		return s, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return s, fmt.Errorf("mock stats: %w", err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		return s, fmt.Errorf("mock stats: %w", err)
	}
	return s, nil
}

// checkClickHouse compares BC's ledger (database db on the server at
// base, read with FINAL: replays collapse) with the mock's counts under
// BC's tag.
func checkClickHouse(ctx context.Context, mock *proc, r int, base, db string) (*StoreIntegrity, error) {
	sent, err := mockSent(ctx, mock.Addr, fmt.Sprintf("BC/%d", r))
	if err != nil {
		return nil, err
	}
	in := &StoreIntegrity{MockRequests: sent.Requests, MockPrompt: sent.PromptTokens, MockCompletion: sent.CompletionTokens}
	var out strings.Builder
	q := "SELECT count(), sum(input_tokens), sum(output_tokens) FROM " + db + ".requests FINAL FORMAT TabSeparated"
	if err := chExec(ctx, base, q, &out); err != nil {
		return nil, fmt.Errorf("read BC's ledger in ClickHouse: %w", err)
	}
	if _, err := fmt.Sscan(out.String(), &in.LedgerRows, &in.LedgerInput, &in.LedgerOutput); err != nil {
		return nil, fmt.Errorf("read BC's ledger in ClickHouse: %q: %w", out.String(), err)
	}
	in.RowsLost = max(0, in.MockRequests-in.LedgerRows)
	in.TokensMatch = in.MockPrompt == in.LedgerInput && in.MockCompletion == in.LedgerOutput
	return in, nil
}

// chExec runs q on the ClickHouse HTTP interface at base, its output (up
// to 1 MiB) into out when out is not nil.
func chExec(ctx context.Context, base, q string, out io.Writer) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base, strings.NewReader(q))
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		return fmt.Errorf("ClickHouse answered %s: %s", resp.Status, strings.TrimSpace(string(msg)))
	}
	if out == nil {
		out = io.Discard
	}
	_, err = io.Copy(out, io.LimitReader(resp.Body, 1<<20))
	return err
}

// redactURL hides a password in a URL for an error message or a report.
func redactURL(s string) string {
	if s == "" {
		return ""
	}
	if u, err := url.Parse(s); err == nil {
		return u.Redacted()
	}
	return "(unparsable URL)"
}

func ledgerSums(ctx context.Context, path string) (rows, input, output int64, err error) {
	db, err := sql.Open("sqlite", path+"?_query_only=1")
	if err != nil {
		return 0, 0, 0, err
	}
	defer db.Close()
	err = db.QueryRowContext(ctx, `SELECT count(*), coalesce(sum(input_tokens), 0), coalesce(sum(output_tokens), 0) FROM requests`).
		Scan(&rows, &input, &output)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("read ledger %q: %w", path, err)
	}
	return rows, input, output, nil
}

var rawMu sync.Mutex

// writeRaw writes an arm's scenarios as JSONL.
func writeRaw(w io.Writer, r int, arm string, ar *ArmResult) {
	for _, j := range ar.JSON {
		writeLine(w, r, arm, "json", j)
	}
	writeLine(w, r, arm, "saturation", ar.Saturation)
	for _, s := range ar.SSE {
		writeLine(w, r, arm, "sse", s)
	}
	if ar.Memory != nil {
		writeLine(w, r, arm, "memory", ar.Memory)
	}
}

// writeLine writes {"round":R,"arm":A,"scenario":S, ...v's fields}.
func writeLine(w io.Writer, r int, arm, scenario string, v any) {
	if w == nil {
		return
	}
	b, err := json.Marshal(v)
	if err != nil || len(b) < 2 || b[0] != '{' {
		return
	}
	head := fmt.Sprintf(`{"round":%d,"arm":%q,"scenario":%q`, r, arm, scenario)
	if len(b) > 2 {
		head += ","
	}
	rawMu.Lock()
	defer rawMu.Unlock()
	_, _ = io.WriteString(w, head+string(b[1:])+"\n")
}

// brief is the progress line of an arm.
func (ar *ArmResult) brief() string {
	var sb strings.Builder
	for _, j := range ar.JSON {
		fmt.Fprintf(&sb, "json@%g p50 %.3f p99 %.3f ms (err %d); ", j.Rate, j.P50, j.P99, j.Errors+j.Dropped)
	}
	fmt.Fprintf(&sb, "sat %.0f rps", ar.Saturation.RPS)
	if ar.Saturation.CPUPerReq > 0 {
		fmt.Fprintf(&sb, " %.1f cpu-µs/req", ar.Saturation.CPUPerReq)
	}
	for _, s := range ar.SSE {
		fmt.Fprintf(&sb, "; sse%d ttft p50 %.2f ms lost %d (err %d)", s.Conc, s.TTFTP50, s.FramesLost, s.Errors)
	}
	fmt.Fprintf(&sb, "; others on its CPU %.0f%%", ar.othersMean())
	return sb.String()
}
