package gateway

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"syscall"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/record"
)

// The proxy-path benchmarks compare tollgate with a bare
// httputil.ReverseProxy over the same loopback upstream and client. Each
// reports ns/op, allocations, and cpu-ns/op (user+system CPU of the whole
// test process per request: client, proxy and upstream together, so the
// ratio understates the proxy's own share; issue 8's harness isolates it).

const benchChunks = 64

func benchStream() string {
	var sb strings.Builder
	sb.WriteString(`data: {"id":"chatcmpl-b","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}` + "\n\n")
	for i := range benchChunks {
		fmt.Fprintf(&sb, `data: {"id":"chatcmpl-b","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" w%d"},"logprobs":null,"finish_reason":null}]}`+"\n\n", i)
	}
	sb.WriteString(`data: {"id":"chatcmpl-b","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}]}` + "\n\n")
	sb.WriteString(`data: {"id":"chatcmpl-b","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":20,"completion_tokens":64,"total_tokens":84}}` + "\n\n")
	sb.WriteString("data: [DONE]\n\n")
	return sb.String()
}

// benchUpstream answers non-streamed requests with a fixed body and
// streamed ones with benchChunks events, one write and flush per event as
// an engine does.
func benchUpstream(b *testing.B) *httptest.Server {
	events := splitEvents(benchStream())
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if !strings.Contains(string(body), `"stream":true`) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, nonStreamBody)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		for _, e := range events {
			_, _ = io.WriteString(w, e)
			_ = rc.Flush()
		}
	}))
	b.Cleanup(srv.Close)
	return srv
}

func benchClient() *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true}}
}

func runProxyBench(b *testing.B, url, body string) {
	client := benchClient()
	b.ReportAllocs()
	var ru0, ru1 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	b.ResetTimer()
	for b.Loop() {
		resp, err := client.Post(url, "application/json", strings.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
	b.StopTimer()
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	cpu := tvNS(ru1.Utime) + tvNS(ru1.Stime) - tvNS(ru0.Utime) - tvNS(ru0.Stime)
	b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
}

func tvNS(tv syscall.Timeval) int64 { return tv.Sec*1e9 + tv.Usec*1e3 }

func BenchmarkProxy(b *testing.B) {
	up := benchUpstream(b)
	const plain = `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	const stream = `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}`

	target, _ := url.Parse(up.URL)
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.FlushInterval = -1 // flush every write, as an SSE proxy must
	rp.Transport = &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true}
	bare := httptest.NewServer(rp)
	b.Cleanup(bare.Close)

	cfg := testConfig(up.URL + "/v1")
	cfg.Sampling.Normal = 0.1
	tg := newTestGateway(b, cfg)
	// A real deployment hands Records to the store's Writer; here they are
	// dropped after Finish so the benchmark measures the proxy path alone.
	tg.discardRecords(b)

	for _, arm := range []struct {
		name, url string
	}{{"bare", bare.URL}, {"tollgate", tg.URL}} {
		b.Run("json/"+arm.name, func(b *testing.B) { runProxyBench(b, arm.url+"/v1/chat/completions", plain) })
		b.Run("sse/"+arm.name, func(b *testing.B) { runProxyBench(b, arm.url+"/v1/chat/completions", stream) })
	}
}

// BenchmarkFinish measures the per-record work after the response: derived
// figures, sampling decision, and metrics.
func BenchmarkFinish(b *testing.B) {
	m := newBenchMetrics()
	g, _ := New(Options{Config: testConfig("http://127.0.0.1:9/v1"), Log: discardLog(), Metrics: m, Sink: func(*record.Record) func(context.Context) error { return nil },
		Observers: []Observer{{Name: "metrics", Observe: m.Observe}}})
	r := &record.Record{RequestID: "req_x", Model: "m", Upstream: "up", BizLine: "b", Stream: true, Status: 200,
		Usage: record.Usage{InputTokens: 10, OutputTokens: 64, Source: record.SourceEngine}}
	r.Marks.FirstClientToken, r.Marks.LastToken, r.Marks.End = 1e6, 64e6, 65e6
	b.ReportAllocs()
	for b.Loop() {
		g.finish(r)
	}
}

// discardRecords drops the gateway's Records as they come, until the
// benchmark ends, so it measures the proxy path alone.
func (tg *testGateway) discardRecords(tb testing.TB) {
	drain := make(chan struct{})
	go func() {
		for {
			select {
			case <-tg.Records:
			case <-drain:
				return
			}
		}
	}()
	tb.Cleanup(func() { close(drain) })
}
