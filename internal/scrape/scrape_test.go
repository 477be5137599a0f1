package scrape

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/tollgate-dev/tollgate/internal/sim"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// logs records log lines for assertions.
type logs struct {
	mu    sync.Mutex
	lines []string
}

func (l *logs) Enabled(context.Context, slog.Level) bool { return true }
func (l *logs) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logs) WithGroup(string) slog.Handler            { return l }
func (l *logs) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	l.mu.Lock()
	l.lines = append(l.lines, b.String())
	l.mu.Unlock()
	return nil
}

func (l *logs) count(prefix string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range l.lines {
		if strings.HasPrefix(line, prefix) {
			n++
		}
	}
	return n
}

// newTestScraper is a Scraper whose rounds the test drives itself.
func newTestScraper(t *testing.T, targets []Target, interval time.Duration) (*Scraper, *prometheus.Registry, *logs) {
	t.Helper()
	reg, l := prometheus.NewRegistry(), &logs{}
	s := New(targets, interval, nil, slog.New(l), reg)
	t.Cleanup(s.client.CloseIdleConnections)
	return s, reg, l
}

// scrapeOnce runs one round and returns its Samples by upstream.
func scrapeOnce(t *testing.T, s *Scraper) map[string][]Sample {
	t.Helper()
	got := map[string][]Sample{}
	s.sink = func(samples []Sample) {
		for _, x := range samples {
			got[x.Upstream] = append(got[x.Upstream], x)
		}
	}
	s.round(t.Context())
	return got
}

// startSim serves a simulated vLLM over HTTP until the test ends.
func startSim(t *testing.T, cfg sim.Config) *httptest.Server {
	t.Helper()
	e, err := sim.New(cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	srv := httptest.NewServer(e.Handler())
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("sim Run: %v", err)
		}
		srv.Close()
	})
	return srv
}

// TestScrapeSim scrapes the simulator's vLLM-named /metrics for real: idle,
// while it is saturated, and after the requests finished.
func TestScrapeSim(t *testing.T) {
	srv := startSim(t, sim.Config{
		Seed:            1,
		MaxRunning:      2,
		PrefillBase:     100 * time.Microsecond,
		PrefillPerToken: time.Microsecond,
		DecodeBase:      3 * time.Millisecond,
		DecodePerSeq:    10 * time.Microsecond,
	})
	metricsURL, err := MetricsURL(srv.URL + "/v1")
	if err != nil {
		t.Fatal(err)
	}
	s, reg, _ := newTestScraper(t, []Target{{Upstream: "sim", Engine: EngineVLLM, URL: metricsURL}}, time.Second)
	const model = "Qwen/Qwen3-8B"
	one := func(got map[string][]Sample) Sample {
		t.Helper()
		if len(got["sim"]) != 1 || got["sim"][0].Model != model || !got["sim"][0].Up {
			t.Fatalf("samples = %+v, want one up sample for %s", got, model)
		}
		return got["sim"][0]
	}

	idle := one(scrapeOnce(t, s))
	wantFloat(t, "idle Running", idle.Running, 0)
	wantFloat(t, "idle Waiting", idle.Waiting, 0)
	wantFloat(t, "idle KVCacheUsage", idle.KVCacheUsage, 0)
	wantFloat(t, "first scrape TTFTP50", idle.TTFTP50, nan)

	// Four requests on two batch slots: two run, two wait.
	const n = 4
	prompt := strings.Repeat("the same long system prompt shared by every request ", 8)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			body, _ := json.Marshal(map[string]any{"model": model,
				"messages": []map[string]string{{"role": "user", "content": prompt}}})
			req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat/completions", bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set(sim.OutputTokensHeader, "120")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Errorf("chat: %v", err)
				return
			}
			defer resp.Body.Close()
			if _, err := io.Copy(io.Discard, resp.Body); err != nil || resp.StatusCode != http.StatusOK {
				t.Errorf("chat: status %d, %v", resp.StatusCode, err)
			}
		})
	}
	var busy Sample
	for deadline := time.Now().Add(5 * time.Second); ; {
		busy = one(scrapeOnce(t, s))
		if busy.Running == 2 && busy.Waiting == 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	wantFloat(t, "busy Running", busy.Running, 2)
	wantFloat(t, "busy Waiting", busy.Waiting, 2)
	if !(busy.KVCacheUsage > 0 && busy.KVCacheUsage <= 1) {
		t.Errorf("busy KVCacheUsage = %v, want in (0, 1]", busy.KVCacheUsage)
	}
	wg.Wait()
	http.DefaultClient.CloseIdleConnections()

	done := one(scrapeOnce(t, s))
	wantFloat(t, "done Running", done.Running, 0)
	wantFloat(t, "done Waiting", done.Waiting, 0)
	wantFloat(t, "done KVCacheUsage", done.KVCacheUsage, 0)
	// The two that waited got their first token during this interval.
	const maxBound = 2560 // vLLM's highest finite TTFT bucket, as in the sim
	p := []float64{done.TTFTP50, done.TTFTP95, done.TTFTP99}
	if !(p[0] > 0 && p[0] <= p[1] && p[1] <= p[2] && p[2] <= maxBound) {
		t.Errorf("TTFT p50/p95/p99 = %v, want 0 < p50 ≤ p95 ≤ p99 ≤ %v", p, maxBound)
	}
	if !(done.GenerationTokensPerS > 0) {
		t.Errorf("GenerationTokensPerS = %v, want > 0", done.GenerationTokensPerS)
	}
	if !(done.PrefixCacheHitRate >= 0 && done.PrefixCacheHitRate <= 1) {
		t.Errorf("PrefixCacheHitRate = %v, want in [0, 1]", done.PrefixCacheHitRate)
	}
	if got := testutil.ToFloat64(s.errors.WithLabelValues("sim")); got != 0 {
		t.Errorf("scrape errors = %v, want 0", got)
	}
	if n, err := testutil.GatherAndCount(reg, "tollgate_scrape_duration_seconds"); err != nil || n != 1 {
		t.Errorf("duration series = %d, %v; want 1", n, err)
	}
}

// TestScrapeFailures: every way a target can fail gives one Sample with Up
// false, an error count and a log line, and never stops the other targets.
func TestScrapeFailures(t *testing.T) {
	handler := func(h http.HandlerFunc) string {
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		return srv.URL + "/metrics"
	}
	vllm, err := os.ReadFile(filepath.Join("testdata", "vllm.1.prom"))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + ln.Addr().String() + "/metrics"
	ln.Close()

	targets := []Target{
		{Upstream: "ok", Engine: EngineVLLM, URL: handler(func(w http.ResponseWriter, r *http.Request) { w.Write(vllm) })},
		{Upstream: "refused", Engine: EngineVLLM, URL: refused},
		{Upstream: "status500", Engine: EngineVLLM, URL: handler(func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "boom", http.StatusInternalServerError)
		})},
		{Upstream: "garbage", Engine: EngineVLLM, URL: handler(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "<html><body>Welcome to nginx!</body></html>\n")
		})},
		{Upstream: "truncated", Engine: EngineVLLM, URL: handler(func(w http.ResponseWriter, r *http.Request) {
			w.Write(vllm[:len(vllm)/2]) // cut inside a line
			io.WriteString(w, "vllm:num_requests_running{model_name=\"m\"")
		})},
		{Upstream: "huge", Engine: EngineVLLM, URL: handler(func(w http.ResponseWriter, r *http.Request) {
			line := []byte("# " + strings.Repeat("x", 1<<16) + "\n")
			for range maxBodyBytes/len(line) + 2 {
				if _, err := w.Write(line); err != nil {
					return
				}
			}
		})},
		{Upstream: "slow", Engine: EngineVLLM, URL: handler(func(w http.ResponseWriter, r *http.Request) {
			<-r.Context().Done() // answers only when the scraper gives up
		})},
		{Upstream: "other-exporter", Engine: EngineVLLM, URL: handler(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "# TYPE node_load1 gauge\nnode_load1 0.5\n")
		})},
		{Upstream: "wants-key", Engine: EngineVLLM, APIKey: "sk-engine", URL: handler(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != "Bearer sk-engine" {
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
			w.Write(vllm)
		})},
	}
	s, _, l := newTestScraper(t, targets, 200*time.Millisecond)
	got := scrapeOnce(t, s)
	for _, tg := range targets {
		samples := got[tg.Upstream]
		okWanted := tg.Upstream == "ok" || tg.Upstream == "wants-key"
		if len(samples) != 1 || samples[0].Up != okWanted {
			t.Errorf("%s: samples %+v, want one with Up=%t", tg.Upstream, samples, okWanted)
			continue
		}
		errs := testutil.ToFloat64(s.errors.WithLabelValues(tg.Upstream))
		if okWanted {
			if errs != 0 {
				t.Errorf("%s: %v errors", tg.Upstream, errs)
			}
			continue
		}
		if x := samples[0]; x.Model != "" || !math.IsNaN(x.Running) || !math.IsNaN(x.KVCacheUsage) || !math.IsNaN(x.TTFTP99) {
			t.Errorf("%s: down sample %+v, want NaN values", tg.Upstream, x)
		}
		if errs != 1 {
			t.Errorf("%s: %v errors, want 1", tg.Upstream, errs)
		}
	}
	if n := l.count("engine metrics scrape failed"); n != len(targets)-2 {
		t.Errorf("%d failure log lines, want %d:\n%s", n, len(targets)-2, strings.Join(l.lines, "\n"))
	}
}

func TestNewSkipsUnscrapable(t *testing.T) {
	s, _, l := newTestScraper(t, []Target{
		{Upstream: "a", Engine: EngineOpenAI, URL: "https://api.example/metrics"},
		{Upstream: "b", Engine: EngineOllama, URL: "http://127.0.0.1:11434/metrics"},
		{Upstream: "c", Engine: EngineSGLang},
		{Upstream: "d", Engine: EngineSGLang, URL: "http://127.0.0.1:30000/metrics"},
	}, 0)
	if len(s.targets) != 1 || s.targets[0].Upstream != "d" {
		t.Errorf("targets = %+v, want only d", s.targets)
	}
	if s.interval != DefaultInterval || s.timeout != maxTimeout {
		t.Errorf("interval, timeout = %v, %v", s.interval, s.timeout)
	}
	if n := len(l.lines); n != 3 {
		t.Errorf("%d log lines, want 3: %q", n, l.lines)
	}
	// Nothing to scrape: Run returns at once.
	none, _, _ := newTestScraper(t, []Target{{Upstream: "a", Engine: EngineOpenAI, URL: "https://api.example/metrics"}}, 0)
	if err := none.Run(t.Context()); err != nil {
		t.Errorf("Run: %v", err)
	}
}

// roundTrip is a fake transport: scrapes in a synctest bubble cannot use
// real sockets.
type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestRun drives Run on a fake clock: a round at once and then every
// interval, deltas across rounds, a failing target's log lines rate
// limited, its recovery logged, and a clean return when ctx ends.
func TestRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		files := [][]byte{}
		for _, name := range []string{"sglang.1.prom", "sglang.2.prom"} {
			b, err := os.ReadFile(filepath.Join("testdata", name))
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, b)
		}
		var mu sync.Mutex
		var rounds [][]Sample
		goodCalls, badUp := 0, false
		sink := func(s []Sample) {
			mu.Lock()
			rounds = append(rounds, s)
			mu.Unlock()
		}
		l := &logs{}
		s := New([]Target{
			{Upstream: "good", Engine: EngineSGLang, URL: "http://good/metrics"},
			{Upstream: "bad", Engine: EngineSGLang, URL: "http://bad/metrics"},
		}, time.Second, sink, slog.New(l), nil)
		s.client.Transport = roundTrip(func(r *http.Request) (*http.Response, error) {
			mu.Lock()
			defer mu.Unlock()
			body := files[0]
			if r.URL.Host == "bad" {
				if !badUp {
					return nil, errors.New("dial tcp: connection refused")
				}
			} else {
				body = files[min(goodCalls, 1)]
				goodCalls++
			}
			return &http.Response{StatusCode: http.StatusOK, Status: "200 OK",
				Body: io.NopCloser(bytes.NewReader(body)), Request: r}, nil
		})

		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx) }()
		synctest.Wait()
		mu.Lock()
		if len(rounds) != 1 {
			t.Fatalf("%d rounds before the first tick, want 1", len(rounds))
		}
		mu.Unlock()

		time.Sleep(time.Second)
		synctest.Wait()
		mu.Lock()
		if len(rounds) != 2 {
			t.Fatalf("%d rounds after one interval, want 2", len(rounds))
		}
		second := map[string]Sample{}
		for _, x := range rounds[1] {
			second[x.Upstream] = x
		}
		mu.Unlock()
		if g := second["good"]; !g.Up || g.Upstream != "good" || !(g.PromptTokensPerS == 20000) {
			t.Errorf("good second round = %+v, want up with Δprompt 20000/1s", g)
		}
		if b := second["bad"]; b.Up {
			t.Errorf("bad = %+v, want down", b)
		}

		// Ten minutes of failures every second: a line at once, then one a
		// minute, not 600.
		time.Sleep(10*time.Minute - time.Second)
		synctest.Wait()
		if n := l.count("engine metrics scrape failed"); n != 11 {
			t.Errorf("%d failure log lines in 10 minutes, want 11", n)
		}
		mu.Lock()
		badUp = true
		mu.Unlock()
		time.Sleep(time.Second)
		synctest.Wait()
		if n := l.count("engine metrics scrape recovered"); n != 1 {
			t.Errorf("%d recovery log lines, want 1", n)
		}

		cancel()
		synctest.Wait()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run = %v, want nil", err)
			}
		default:
			t.Fatal("Run did not return after cancel")
		}
	})
}
