// Package soak is the soak harness (tollgate bench soak, issue 10): steady
// streaming load through a real `tollgate serve` to the simulator for a
// long time, watching the gateway's memory and goroutines.
//
// It sits outside the request flow, around it:
//
//	open-loop driver ──▶ tollgate serve (child) ──▶ tollgate sim (child)
//	        sampler ──▶ /proc/PID/status VmRSS, /metrics go_goroutines
//
// Both children are this binary re-executed, so what is measured is the
// gateway as shipped (no race detector, no test harness). The verdict:
// RSS growth from the warm-up point to the end of the load under the limit
// (each end the mean of the samples of one window, so one GC cycle does not
// decide it), and goroutines back to their idle baseline once the load has
// stopped and idle connections have closed.
package soak

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate-dev/tollgate/internal/childproc"
	"github.com/tollgate-dev/tollgate/internal/loadgen"
	"github.com/tollgate-dev/tollgate/internal/sim"
)

// Options configure a run. Zero values of the durations take the defaults.
type Options struct {
	Exe string // the tollgate binary to run as serve and sim
	Dir string // ledger, configs and logs

	Duration time.Duration // steady load
	Rate     float64       // requests per second, constant arrivals
	Warmup   time.Duration // from the load's start to the RSS reference point
	Window   time.Duration // RSS at each end: mean of the samples of this long
	Interval time.Duration // between samples
	// Settle bounds the wait, after the load, for goroutines to return to
	// the baseline: the gateway's idle upstream connections close after
	// its 90 s IdleConnTimeout.
	Settle time.Duration

	InputLen, OutputLen int // synthetic prompt tokens, and output tokens (X-Sim-Output-Tokens)

	MaxGrowth      float64 // RSS growth limit, e.g. 0.05
	GoroutineSlack int     // goroutines allowed above the baseline at the end

	Progress io.Writer // one line per sample; nil: silent
}

func (o *Options) defaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&o.Warmup, 2*time.Minute)
	def(&o.Window, time.Minute)
	def(&o.Interval, 5*time.Second)
	def(&o.Settle, 3*time.Minute)
	if o.InputLen == 0 {
		o.InputLen = 128
	}
	if o.OutputLen == 0 {
		o.OutputLen = 32
	}
	if o.MaxGrowth == 0 {
		o.MaxGrowth = 0.05
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
}

// Validate names the flag that is wrong.
func (o *Options) Validate() error {
	switch {
	case o.Exe == "" || o.Dir == "":
		return errors.New("soak: the binary and the work directory must be set")
	case o.Duration <= 0:
		return fmt.Errorf("--duration: must be positive, got %s", o.Duration)
	case !(o.Rate > 0) || o.Rate > 10000:
		return fmt.Errorf("--rps: must be in (0, 10000], got %g", o.Rate)
	case o.Warmup < 0 || o.Window < 0 || o.Interval < 0 || o.Settle < 0:
		return errors.New("--warmup, --window, --interval, --settle: must not be negative")
	case o.Warmup+2*o.Window > o.Duration:
		return fmt.Errorf("--duration %s: must leave room for --warmup %s and two --window %s (the two RSS ends)", o.Duration, o.Warmup, o.Window)
	case o.Interval > o.Window:
		return fmt.Errorf("--interval %s: must not be longer than --window %s", o.Interval, o.Window)
	case o.InputLen < 1 || o.OutputLen < 1:
		return errors.New("--input-len, --output-len: must be at least 1")
	case o.MaxGrowth < 0 || o.GoroutineSlack < 0:
		return errors.New("--max-growth, --goroutine-slack: must not be negative")
	}
	return nil
}

// Sample is one reading of the gateway.
type Sample struct {
	At         time.Duration `json:"at"`    // since the load started (negative: before)
	Phase      string        `json:"phase"` // idle, load, settle
	RSSKiB     int64         `json:"rss_kib"`
	Goroutines int           `json:"goroutines"`
	InFlight   int           `json:"in_flight"`
}

// Report is a run's figures and verdict.
type Report struct {
	Duration   time.Duration `json:"duration"`
	Rate       float64       `json:"rps"`
	Sent       int64         `json:"sent"`
	OK         int64         `json:"ok"`
	Failed     int64         `json:"failed"`
	FirstError string        `json:"first_error,omitempty"`
	LedgerRows int64         `json:"ledger_rows"`

	RSSWarmKiB int64   `json:"rss_warm_kib"` // mean over the window after the warm-up
	RSSEndKiB  int64   `json:"rss_end_kib"`  // mean over the last window of the load
	RSSPeakKiB int64   `json:"rss_peak_kib"`
	RSSGrowth  float64 `json:"rss_growth"` // (end − warm) / warm

	GoroutinesBaseline int           `json:"goroutines_baseline"` // idle, before the load
	GoroutinesPeak     int           `json:"goroutines_peak"`
	GoroutinesEnd      int           `json:"goroutines_end"`
	SettledAfter       time.Duration `json:"settled_after"` // from the load's end; -1: never

	LoadAvg  string   `json:"loadavg"` // /proc/loadavg at the end
	Samples  []Sample `json:"samples"`
	Failures []string `json:"failures,omitempty"`
}

// Passed reports whether the run met every limit.
func (r *Report) Passed() bool { return len(r.Failures) == 0 }

// Run starts the simulator and the gateway, drives the load, samples
// the gateway throughout and judges the run.
func Run(ctx context.Context, o Options) (*Report, error) {
	o.defaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	simAddr, err := childproc.FreeAddr()
	if err != nil {
		return nil, err
	}
	gwAddr, err := childproc.FreeAddr()
	if err != nil {
		return nil, err
	}
	// Enough batch slots that the engine never queues at this rate, and no
	// per-sequence decode cost, so a stream's length does not depend on
	// how many others run: the gateway sees the same load all along.
	simProc, err := childproc.Start(ctx, childproc.Spec{Name: "sim", Exe: o.Exe,
		Args: []string{"sim", "--listen", simAddr, "--max-running", "4096", "--decode-per-seq", "0"},
		Addr: simAddr, Health: "/health", LogPath: o.Dir + "/sim.log"})
	if err != nil {
		return nil, err
	}
	defer simProc.Kill()
	db := o.Dir + "/soak.db"
	cfg := o.Dir + "/soak.yml"
	if err := os.WriteFile(cfg, []byte(serveConfig(gwAddr, "http://"+simAddr+"/v1", db)), 0o644); err != nil {
		return nil, err
	}
	gw, err := childproc.Start(ctx, childproc.Spec{Name: "serve", Exe: o.Exe, Args: []string{"serve", "--config", cfg},
		Addr: gwAddr, LogPath: o.Dir + "/serve.log"})
	if err != nil {
		return nil, err
	}
	defer gw.Kill()

	rep := &Report{Duration: o.Duration, Rate: o.Rate, SettledAfter: -1}
	scrape := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	read := func(phase string, at time.Duration) (Sample, error) {
		s := Sample{At: at.Round(time.Second), Phase: phase}
		var err error
		if s.RSSKiB, err = rss(gw.Pid()); err != nil {
			return s, err
		}
		m, err := scrapeGauges(ctx, scrape, "http://"+gwAddr+"/metrics", "go_goroutines", "tollgate_requests_in_flight")
		if err != nil {
			return s, err
		}
		s.Goroutines, s.InFlight = int(m[0]), int(m[1])
		fmt.Fprintf(o.Progress, "soak %-6s %8s  rss %7.1f MiB  goroutines %5d  in flight %4d\n",
			phase, s.At, float64(s.RSSKiB)/1024, s.Goroutines, s.InFlight)
		return s, nil
	}

	// The idle baseline: the fewest goroutines over a few seconds, so a
	// start-up task still running at the first sample does not lift it.
	for i := range 5 {
		if i > 0 {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(time.Second):
			}
		}
		s, err := read("idle", time.Duration(i-5)*time.Second)
		if err != nil {
			return nil, fmt.Errorf("read the idle gateway: %w", err)
		}
		if i == 0 || s.Goroutines < rep.GoroutinesBaseline {
			rep.GoroutinesBaseline = s.Goroutines
		}
		rep.Samples = append(rep.Samples, s)
	}

	// Each answer ends by itself (finish_reason stop) after OutputLen
	// tokens, the simulator told by its header, under a max_tokens it
	// does not reach: a steady mix that trips no alert rule.
	w, err := loadgen.NewSynthetic(loadgen.Synthetic{Model: "Qwen/Qwen3-8B", Chat: true, InputLen: o.InputLen, OutputLen: 2 * o.OutputLen, Seed: 1})
	if err != nil {
		return nil, err
	}
	hdr := http.Header{}
	hdr.Set(sim.OutputTokensHeader, strconv.Itoa(o.OutputLen))
	client := loadgen.NewClient("http://"+gwAddr+"/v1", hdr, max(int(o.Rate*4), 16), 2*time.Minute)

	// The load: constant arrivals, one goroutine per request, each
	// answer checked and dropped (a 30-minute run keeps no per-request
	// data, so the driver's own memory stays flat too).
	start := time.Now()
	loadCtx, stopLoad := context.WithTimeout(ctx, o.Duration)
	defer stopLoad()
	var sent, ok, failed atomic.Int64
	var firstErr sync.Once
	var wg sync.WaitGroup
	wg.Go(func() {
		every := time.Duration(float64(time.Second) / o.Rate)
		for i := 0; ; i++ {
			due := start.Add(time.Duration(i) * every)
			select {
			case <-loadCtx.Done():
				return
			case <-time.After(time.Until(due)):
			}
			sent.Add(1)
			wg.Go(func() {
				r := client.Send(ctx, w.Request(i))
				if r.Err == nil && len(r.Events) == 0 {
					r.Err = errors.New("no events in the stream")
				}
				if r.Err != nil {
					failed.Add(1)
					firstErr.Do(func() { rep.FirstError = r.Err.Error() })
					return
				}
				ok.Add(1)
			})
		}
	})

	tick := time.NewTicker(o.Interval)
	defer tick.Stop()
	var loadErr error
sampling:
	for {
		select {
		case <-ctx.Done():
			loadErr = ctx.Err()
			break sampling
		case <-loadCtx.Done():
			break sampling
		case <-tick.C:
			s, err := read("load", time.Since(start))
			if err != nil {
				loadErr = fmt.Errorf("sample the gateway: %w", err)
				stopLoad()
				break sampling
			}
			rep.Samples = append(rep.Samples, s)
		}
	}
	wg.Wait()
	loadEnd := time.Since(start)
	rep.Sent, rep.OK, rep.Failed = sent.Load(), ok.Load(), failed.Load()
	if loadErr != nil {
		return rep, loadErr
	}
	client.CloseIdle()

	// Settle: goroutines back to the idle baseline, polled until Settle.
	for {
		s, err := read("settle", time.Since(start))
		if err != nil {
			return rep, fmt.Errorf("sample the gateway: %w", err)
		}
		rep.Samples = append(rep.Samples, s)
		if s.Goroutines <= rep.GoroutinesBaseline+o.GoroutineSlack {
			rep.SettledAfter = (time.Since(start) - loadEnd).Round(time.Second)
			break
		}
		if time.Since(start)-loadEnd >= o.Settle {
			break
		}
		select {
		case <-ctx.Done():
			return rep, ctx.Err()
		case <-time.After(time.Second):
		}
	}

	if err := gw.Stop(time.Minute); err != nil {
		return rep, err
	}
	if rep.LedgerRows, err = ledgerRows(ctx, db); err != nil {
		return rep, err
	}
	rep.LoadAvg = loadavg()
	judge(rep, o, loadEnd)
	return rep, nil
}

// serveConfig is the gateway's configuration: the defaults (durable
// ledger, engine metrics scraped from the simulator) with one upstream, a
// price so every request is rated, and no OTLP listeners, which would take
// the well-known ports 4317 and 4318 from whatever else runs on the machine.
func serveConfig(listen, upstream, db string) string {
	return fmt.Sprintf(`# written by tollgate bench soak
listen: %q
log: {level: warn}
store:
  sqlite: {path: %q}
upstreams:
  - {name: sim, url: %q, engine: vllm}
prices:
  - {model: Qwen/Qwen3-8B, currency: USD, input: 0.15, cached_input: 0.075, output: 0.60}
otlp: {http_listen: "", grpc_listen: ""}
`, listen, db, upstream)
}

// judge fills in the figures the samples give and the failures.
func judge(rep *Report, o Options, loadEnd time.Duration) {
	var warm, end []int64
	for _, s := range rep.Samples {
		rep.RSSPeakKiB = max(rep.RSSPeakKiB, s.RSSKiB)
		rep.GoroutinesPeak = max(rep.GoroutinesPeak, s.Goroutines)
		if s.Phase != "load" {
			continue
		}
		if s.At >= o.Warmup && s.At < o.Warmup+o.Window {
			warm = append(warm, s.RSSKiB)
		}
		if s.At > loadEnd-o.Window {
			end = append(end, s.RSSKiB)
		}
	}
	rep.GoroutinesEnd = rep.Samples[len(rep.Samples)-1].Goroutines
	rep.RSSWarmKiB, rep.RSSEndKiB = mean(warm), mean(end)
	if rep.RSSWarmKiB > 0 {
		rep.RSSGrowth = float64(rep.RSSEndKiB-rep.RSSWarmKiB) / float64(rep.RSSWarmKiB)
	}
	fail := func(format string, a ...any) { rep.Failures = append(rep.Failures, fmt.Sprintf(format, a...)) }
	if len(warm) == 0 || len(end) == 0 {
		fail("too few samples to judge RSS (%d at the warm-up point, %d at the end)", len(warm), len(end))
	} else if rep.RSSGrowth >= o.MaxGrowth {
		fail("RSS grew %.1f %% (from %d to %d KiB), limit %.1f %%", 100*rep.RSSGrowth, rep.RSSWarmKiB, rep.RSSEndKiB, 100*o.MaxGrowth)
	}
	if rep.SettledAfter < 0 {
		fail("goroutines did not return to the baseline %d (+%d) within %s of the load's end: %d", rep.GoroutinesBaseline, o.GoroutineSlack, o.Settle, rep.GoroutinesEnd)
	}
	if rep.Failed > 0 {
		fail("%d of %d requests failed (first: %s)", rep.Failed, rep.Sent, rep.FirstError)
	}
	if rep.LedgerRows != rep.Sent {
		fail("ledger has %d rows for %d requests sent", rep.LedgerRows, rep.Sent)
	}
}

func mean(vs []int64) int64 {
	if len(vs) == 0 {
		return 0
	}
	var sum int64
	for _, v := range vs {
		sum += v
	}
	return sum / int64(len(vs))
}

// WriteText prints the report's figures and verdict.
func (r *Report) WriteText(w io.Writer) {
	mib := func(kib int64) float64 { return float64(kib) / 1024 }
	fmt.Fprintf(w, "soak: %s at %g requests/s: %d sent, %d ok, %d failed; ledger rows %d\n", r.Duration, r.Rate, r.Sent, r.OK, r.Failed, r.LedgerRows)
	fmt.Fprintf(w, "RSS: warm %.1f MiB, end %.1f MiB, growth %+.2f %%, peak %.1f MiB\n", mib(r.RSSWarmKiB), mib(r.RSSEndKiB), 100*r.RSSGrowth, mib(r.RSSPeakKiB))
	settled := "never"
	if r.SettledAfter >= 0 {
		settled = r.SettledAfter.String() + " after the load"
	}
	fmt.Fprintf(w, "goroutines: baseline %d, peak %d, end %d (back to baseline: %s)\n", r.GoroutinesBaseline, r.GoroutinesPeak, r.GoroutinesEnd, settled)
	fmt.Fprintf(w, "load average at the end: %s\n", r.LoadAvg)
	if r.Passed() {
		fmt.Fprintln(w, "PASS")
		return
	}
	for _, f := range r.Failures {
		fmt.Fprintln(w, "FAIL:", f)
	}
}
