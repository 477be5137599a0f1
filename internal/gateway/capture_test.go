package gateway

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tollgate-dev/tollgate/internal/capture"
	"github.com/tollgate-dev/tollgate/internal/config"
)

func captureConfig(url string, slow time.Duration) *config.Config {
	cfg := testConfig(url)
	cfg.Capture = capture.Config{Enabled: true, Slow: slow, Retention: time.Hour,
		Redact: []capture.Rule{{Preset: "cn_id_card"}, {Preset: "cn_mobile"}, {Preset: "email"}}}
	// capture.enabled is refused without an admin token to read captures.
	cfg.API.Tokens = []config.APIToken{{Name: "root", TokenSHA256: config.HashKey("tok-admin"), Role: "admin"}}
	return cfg
}

// streamOf is a chat stream whose deltas are pieces.
func streamOf(pieces ...string) string {
	var sb strings.Builder
	for _, p := range pieces {
		fmt.Fprintf(&sb, `data: {"id":"c","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"content":%q},"finish_reason":null}]}`+"\n\n", p)
	}
	sb.WriteString(`data: {"id":"c","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\n")
	sb.WriteString(`data: {"id":"c","object":"chat.completion.chunk","model":"m","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":4,"total_tokens":9}}` + "\n\n")
	return sb.String() + "data: [DONE]\n\n"
}

// TestCaptureStream: a stream's text is captured as its deltas joined, so
// a phone number the engine sent in three pieces is still redacted; the
// request's email too. Every request qualifies here (slow: 1ns).
func TestCaptureStream(t *testing.T) {
	up := newTranscriptUpstream(t, streamOf("call ", "138", "0013", "8000", " now"))
	got := make(chan []*capture.Capture, 4)
	tg := newTestGatewayWith(t, captureConfig(up.URL(), time.Nanosecond), func(o *Options) {
		o.Capture = func(_ context.Context, cs []*capture.Capture) error { got <- cs; return nil }
		o.Registerer = prometheus.NewRegistry()
	})
	resp := post(t, tg.URL+"/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"mail li.lei@example.com"}]}`, nil)
	body := string(readAll(t, resp))
	if !strings.Contains(body, `"138"`) {
		t.Fatalf("the client's stream was changed: %s", body)
	}
	rec := tg.next(t)
	var cs []*capture.Capture
	select {
	case cs = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("no capture written within 10s")
	}
	if len(cs) != 1 {
		t.Fatalf("%d captures, want 1", len(cs))
	}
	c := cs[0]
	if c.RequestID != rec.RequestID || c.Reason != "slow" || !c.At.Equal(rec.Arrival) {
		t.Errorf("capture %s %s %v, record %s %v", c.RequestID, c.Reason, c.At, rec.RequestID, rec.Arrival)
	}
	if want := "call [REDACTED:cn_mobile] now"; string(c.Response) != want {
		t.Errorf("response %q, want %q", c.Response, want)
	}
	if want := `{"messages":[{"content":"mail [REDACTED:email]","role":"user"}],"model":"m","stream":true}`; string(c.Request) != want {
		t.Errorf("request %s, want %s", c.Request, want)
	}
	if c.RequestTruncated || c.ResponseTruncated {
		t.Errorf("truncated: %+v", c)
	}
}

// TestCaptureQueueFull: a store that does not answer never holds up a
// response; captures beyond the queue are dropped and counted, and those
// queued are written by Close.
func TestCaptureQueueFull(t *testing.T) {
	up := newTranscriptUpstream(t, "")
	up.ctype, up.status, up.rawBody = "application/json", 500, `{"error":{"message":"boom 13800138000"}}`
	up.bodies, up.headers = make(chan []byte, captureQueue+captureBatch+16), make(chan http.Header, captureQueue+captureBatch+16)
	release := make(chan struct{})
	var written int
	reg := prometheus.NewRegistry()
	tg := newTestGatewayWith(t, captureConfig(up.URL(), 0), func(o *Options) {
		o.Capture = func(_ context.Context, cs []*capture.Capture) error {
			<-release
			written += len(cs)
			for _, c := range cs {
				if strings.Contains(string(c.Response), "13800138000") {
					t.Errorf("unredacted response stored: %s", c.Response)
				}
			}
			return nil
		}
		o.Registerer = reg
	})
	n := captureQueue + captureBatch + 10
	for range n {
		resp := post(t, tg.URL+"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, nil)
		if readAll(t, resp); resp.StatusCode != 500 {
			t.Fatalf("status %d, want the upstream's 500", resp.StatusCode)
		}
		tg.next(t)
	}
	// A capture is offered just after its Record is handed on: wait for
	// the last one before counting.
	waitFor(t, "every capture offered", func() bool { return tg.G.capture.offered.Load() == int64(n) })
	dropped := testutil.ToFloat64(tg.G.capture.dropped.WithLabelValues("queue_full"))
	// The blocked writer holds one batch (1 to captureBatch captures, as
	// many as were queued when it started), captureQueue wait; the rest drop.
	if lo, hi := float64(n-captureQueue-captureBatch), float64(n-captureQueue-1); dropped < lo || dropped > hi {
		t.Errorf("dropped %v, want %v to %v (a batch in the writer, %d queued)", dropped, lo, hi, captureQueue)
	}
	close(release)
	tg.G.Close()
	if float64(written)+dropped != float64(n) {
		t.Errorf("written %d + dropped %v != %d requests", written, dropped, n)
	}
	if w := testutil.ToFloat64(tg.G.capture.written.WithLabelValues("failed")); w != float64(written) {
		t.Errorf("tollgate_captures_total{reason=failed} = %v, want %d", w, written)
	}
}

// TestCaptureSkipsFastSuccess: with slow set, a fast successful answer is
// not captured; and with capture off, exchanges keep nothing.
func TestCaptureSkipsFastSuccess(t *testing.T) {
	up := newTranscriptUpstream(t, "")
	up.ctype, up.rawBody = "application/json", nonStreamBody
	got := make(chan []*capture.Capture, 4)
	tg := newTestGatewayWith(t, captureConfig(up.URL(), time.Hour), func(o *Options) {
		o.Capture = func(_ context.Context, cs []*capture.Capture) error { got <- cs; return nil }
	})
	readAll(t, post(t, tg.URL+"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, nil))
	tg.next(t)
	tg.G.Close() // writes whatever was queued
	select {
	case cs := <-got:
		t.Errorf("a fast successful request was captured: %+v", cs[0])
	default:
	}

	off := newTestGateway(t, testConfig(up.URL()))
	if off.G.capture != nil {
		t.Fatal("a capturer exists with capture off")
	}
}

// BenchmarkProxyCapture is BenchmarkProxy's tollgate arm with capture
// off and on (slow: 1h, so nothing qualifies: the cost of keeping what a
// capture would need, and of asking).
func BenchmarkProxyCapture(b *testing.B) {
	up := benchUpstream(b)
	const plain = `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	const stream = `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}`
	for _, on := range []bool{false, true} {
		cfg := testConfig(up.URL + "/v1")
		cfg.Sampling.Normal = 0.1
		name := "off"
		if on {
			cfg = captureConfig(up.URL+"/v1", time.Hour)
			cfg.Sampling.Normal = 0.1
			name = "on"
		}
		tg := newTestGatewayWith(b, cfg, func(o *Options) {
			o.Capture = func(context.Context, []*capture.Capture) error { return nil }
		})
		tg.discardRecords(b)
		b.Run("json/"+name, func(b *testing.B) { runProxyBench(b, tg.URL+"/v1/chat/completions", plain) })
		b.Run("sse/"+name, func(b *testing.B) { runProxyBench(b, tg.URL+"/v1/chat/completions", stream) })
	}
}

// TestCaptureChunkText: the text kept from stream events is what a JSON
// decoder would read from their text fields, escapes included, and
// nothing else.
func TestCaptureChunkText(t *testing.T) {
	b := &captureBuf{limit: 1 << 10}
	for _, ev := range []string{
		`{"id":"x","model":"content","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`,
		`{"choices":[{"delta":{"reasoning_content":"think "}}]}`,
		`{"choices":[{"delta":{"content":"say \"content\":\"no\" \u4f60\u597d\n"}}]}`,
		`{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"name":"f","arguments":"{\"a\":1}"}}]}}]}`,
		`{"choices":[{"text":"completion","index":0,"logprobs":{"content":[{"token":"x"}]}}]}`,
		`{"choices":[{"delta":{"content":"cut`, // malformed: nothing kept
	} {
		b.chunk([]byte(ev))
	}
	want := "think say \"content\":\"no\" 你好\nf{\"a\":1}completion"
	if got := string(b.text.Part().Bytes); got != want {
		t.Errorf("kept %q\n want %q", got, want)
	}
}

// TestCaptureHidesKeys: an engine's error that echoes the upstream's key
// or the client's is stored without them, though no redaction rule knows
// them.
func TestCaptureHidesKeys(t *testing.T) {
	const upKey, clientKey = "sk-upstream-SECRET-4242", "sk-client-SECRET-7373"
	up := newTranscriptUpstream(t, "")
	up.ctype, up.status = "application/json", 401
	up.rawBody = `{"error":{"message":"bad key ` + upKey + ` (client sent ` + clientKey + `)","type":"auth"}}`
	got := make(chan []*capture.Capture, 4)
	cfg := captureConfig(up.URL(), 0)
	cfg.Upstreams[0].APIKey = upKey
	tg := newTestGatewayWith(t, cfg, func(o *Options) {
		o.Capture = func(_ context.Context, cs []*capture.Capture) error { got <- cs; return nil }
	})
	client := string(readAll(t, post(t, tg.URL+"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
		map[string]string{"Authorization": "Bearer " + clientKey})))
	// The error is OpenAI-shaped, so it is relayed as the engine wrote
	// it — but without the keys it echoes.
	if strings.Contains(client, "SECRET") || !strings.Contains(client, "[redacted]") {
		t.Errorf("client got %s", client)
	}
	tg.next(t)
	var cs []*capture.Capture
	select {
	case cs = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("no capture written within 10s")
	}
	resp := string(cs[0].Response)
	if strings.Contains(resp, upKey) || strings.Contains(resp, clientKey) || strings.Count(resp, "[REDACTED:key]") != 2 {
		t.Errorf("captured response %s", resp)
	}
}
