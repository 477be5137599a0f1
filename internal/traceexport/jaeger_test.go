package traceexport

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
)

// client queries Jaeger; its idle connections are closed when Jaeger stops,
// so that no goroutine outlives the test.
var client = &http.Client{Transport: &http.Transport{}, Timeout: 10 * time.Second}

// jaegerBinary finds a Jaeger v2 binary: $TOLLGATE_JAEGER, or where
// tools/jaeger/build.sh puts it by default.
func jaegerBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("TOLLGATE_JAEGER"); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("TOLLGATE_JAEGER=%s: %v", p, err)
		}
		return p
	}
	p, _ := filepath.Abs("../../tools/jaeger/bin/jaeger")
	if _, err := os.Stat(p); err != nil {
		t.Skipf("no Jaeger v2 binary: set TOLLGATE_JAEGER, or build it with tools/jaeger/build.sh (to %s)", p)
	}
	return p
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// jaegerConfig is an all-in-one Jaeger v2 on loopback: the OTLP/HTTP
// receiver, in-memory storage, and the query service (HTTP and gRPC, both
// moved off their default ports), without the collector's own metrics
// endpoint. Jaeger v2 turns the query service's self-tracing on by
// default, exporting to localhost:4317: off, so that it neither touches
// another process's port nor holds up shutdown for its export timeout.
const jaegerConfig = `service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 1000
  jaeger_query:
    enable_tracing: false
    storage:
      traces: memstore
    http:
      endpoint: 127.0.0.1:%d
    grpc:
      endpoint: 127.0.0.1:%d
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:%d
processors:
  batch:
    timeout: 100ms
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
`

// lockedBuffer collects the child's output, written from exec's copying
// goroutines and read by the test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startJaeger runs Jaeger until the test ends and returns the OTLP base URL
// and the query base URL once the query service answers.
func startJaeger(t *testing.T, bin string) (otlpURL, queryURL string) {
	t.Helper()
	otlpPort, httpPort, grpcPort := freePort(t), freePort(t), freePort(t)
	cfg := filepath.Join(t.TempDir(), "jaeger.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, jaegerConfig, httpPort, grpcPort, otlpPort), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config", cfg)
	var out lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		client.CloseIdleConnections()
		if t.Failed() {
			t.Logf("jaeger output:\n%s", out.String())
		}
	})

	otlpURL = "http://127.0.0.1:" + strconv.Itoa(otlpPort)
	queryURL = "http://127.0.0.1:" + strconv.Itoa(httpPort)
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case err := <-exited:
			t.Fatalf("jaeger exited: %v\n%s", err, out.String())
		default:
		}
		if resp, err := client.Get(queryURL + "/api/v3/services"); err == nil {
			resp.Body.Close()
			if c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(otlpPort), time.Second); err == nil {
				c.Close()
				if resp.StatusCode == http.StatusOK {
					return otlpURL, queryURL
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("jaeger not ready in 60s:\n%s", out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// The v3 query API answers OTLP JSON (hex ids, enums as numbers, 64-bit
// integers as strings).
type otlpJSON struct {
	Result struct {
		ResourceSpans []struct {
			Resource struct {
				Attributes []kv `json:"attributes"`
			} `json:"resource"`
			ScopeSpans []struct {
				Spans []jspan `json:"spans"`
			} `json:"scopeSpans"`
		} `json:"resourceSpans"`
	} `json:"result"`
}

type jspan struct {
	TraceID      string `json:"traceId"`
	SpanID       string `json:"spanId"`
	ParentSpanID string `json:"parentSpanId"`
	Name         string `json:"name"`
	Kind         int    `json:"kind"`
	Start        string `json:"startTimeUnixNano"`
	End          string `json:"endTimeUnixNano"`
	Attributes   []kv   `json:"attributes"`
	Status       struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"status"`
}

type kv struct {
	Key   string `json:"key"`
	Value struct {
		String *string      `json:"stringValue"`
		Int    *json.Number `json:"intValue"`
		Double *float64     `json:"doubleValue"`
		Bool   *bool        `json:"boolValue"`
		Array  *struct {
			Values []struct {
				String string `json:"stringValue"`
			}
		} `json:"arrayValue"`
	} `json:"value"`
}

// value renders an attribute as the in-memory tests see it.
func (a kv) value() any {
	v := a.Value
	switch {
	case v.String != nil:
		return *v.String
	case v.Int != nil:
		n, _ := v.Int.Int64()
		return n
	case v.Double != nil:
		return *v.Double
	case v.Bool != nil:
		return *v.Bool
	case v.Array != nil:
		var s []string
		for _, x := range v.Array.Values {
			s = append(s, x.String)
		}
		return s
	}
	return nil
}

func nanos(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

func attrsOf(kvs []kv) map[string]any {
	m := make(map[string]any, len(kvs))
	for _, a := range kvs {
		m[a.Key] = a.value()
	}
	return m
}

// queryTrace polls Jaeger's v3 API until the trace has want spans.
func queryTrace(t *testing.T, queryURL, traceID string, want int) (service string, spans []jspan) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var last string
	for {
		resp, err := client.Get(queryURL + "/api/v3/traces/" + traceID + "?raw_traces=true")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			last = fmt.Sprintf("%d %s", resp.StatusCode, b)
			if resp.StatusCode == http.StatusOK {
				var doc otlpJSON
				if err := json.Unmarshal(b, &doc); err != nil {
					t.Fatalf("decode %s: %v", b, err)
				}
				spans = spans[:0]
				for _, rs := range doc.Result.ResourceSpans {
					if s, ok := attrsOf(rs.Resource.Attributes)["service.name"].(string); ok {
						service = s
					}
					for _, ss := range rs.ScopeSpans {
						spans = append(spans, ss.Spans...)
					}
				}
				if len(spans) >= want {
					return service, spans
				}
			}
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			t.Fatalf("trace %s: %d spans after 30s, want %d; last answer: %s", traceID, len(spans), want, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestJaeger sends tollgate's spans to a real Jaeger v2 over OTLP/HTTP and
// reads them back through its query API.
func TestJaeger(t *testing.T) {
	bin := jaegerBinary(t)
	otlpURL, queryURL := startJaeger(t, bin)

	e, err := New(context.Background(), Config{Endpoint: otlpURL, Upstreams: upstreams}, slog.New(slog.NewTextHandler(os.Stderr, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ok, bad := streamed(), failed()
	e.Export(ok)
	e.Export(bad)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	t.Run("streamed", func(t *testing.T) {
		service, spans := queryTrace(t, queryURL, ok.TraceID, 9)
		if service != "tollgate" {
			t.Errorf("service %q", service)
		}
		req, children := jaegerSplit(t, spans, ok.SpanID)
		// A child of the client's span: Jaeger nests it under the caller.
		if req.Name != "chat Qwen/Qwen3-8B" || req.Kind != 3 || req.ParentSpanID != ok.ParentSpanID || req.TraceID != ok.TraceID {
			t.Errorf("request span %+v, want a CLIENT span under %s in trace %s", req, ok.ParentSpanID, ok.TraceID)
		}
		if nanos(req.Start) != ok.Arrival.UnixNano() {
			t.Errorf("start %s, want %d", req.Start, ok.Arrival.UnixNano())
		}
		if nanos(req.End) != ok.Arrival.Add(ok.Derived.E2E).UnixNano() {
			t.Errorf("end %s, want arrival + E2E", req.End)
		}
		a := attrsOf(req.Attributes)
		for k, want := range map[string]any{
			"gen_ai.operation.name": "chat", "gen_ai.provider.name": "vllm",
			"gen_ai.request.model": "Qwen/Qwen3-8B", "gen_ai.response.model": "Qwen/Qwen3-8B-FP8",
			"gen_ai.usage.input_tokens": int64(120), "gen_ai.usage.output_tokens": int64(100),
			"gen_ai.usage.cache_read.input_tokens": int64(64),
			"gen_ai.response.finish_reasons":       []string{"stop"},
			"gen_ai.response.time_to_first_chunk":  0.208,
			"gen_ai.response.id":                   "chatcmpl-9f1c", "gen_ai.conversation.id": "conv-42",
			"server.address": "10.0.0.7", "server.port": int64(8000),
			"tollgate.request_id": "req-1", "tollgate.biz_line": "assistant",
			"tollgate.status": int64(200), "tollgate.usage_source": "engine", "tollgate.ttft_ms": 208.0,
		} {
			if !gocmp.Equal(a[k], want) {
				t.Errorf("%s = %#v, want %#v", k, a[k], want)
			}
		}
		var sum int64
		var names []string
		for _, c := range children {
			sum += nanos(c.End) - nanos(c.Start)
			names = append(names, c.Name)
			if src, _ := attrsOf(c.Attributes)["tollgate.segment.source"].(string); src == "" {
				t.Errorf("segment %s without a source", c.Name)
			}
		}
		want := []string{"gateway_queue", "connect", "engine_queue", "prefill", "decode", "client_write", "post_processing", "unattributed"}
		if !gocmp.Equal(names, want) {
			t.Errorf("segments %v, want %v", names, want)
		}
		if sum != int64(ok.Derived.E2E) {
			t.Errorf("segments sum to %dns, E2E is %v", sum, ok.Derived.E2E)
		}
	})

	t.Run("failed", func(t *testing.T) {
		_, spans := queryTrace(t, queryURL, bad.TraceID, 3)
		req, children := jaegerSplit(t, spans, bad.SpanID)
		if req.ParentSpanID != "" {
			t.Errorf("parent %s, want none: the client sent no traceparent", req.ParentSpanID)
		}
		a := attrsOf(req.Attributes)
		if req.Status.Code != 2 || req.Status.Message != "upstream answered 503" || a["error.type"] != "upstream_error" {
			t.Errorf("status %+v, error.type %v: want Error, upstream_error", req.Status, a["error.type"])
		}
		if len(children) != 2 {
			t.Errorf("%d segments, want gateway_queue and prefill", len(children))
		}
	})
}

// jaegerSplit finds the request span by its id and its children by start.
func jaegerSplit(t *testing.T, spans []jspan, spanID string) (jspan, []jspan) {
	t.Helper()
	var req *jspan
	var children []jspan
	for i, s := range spans {
		switch {
		case s.SpanID == spanID:
			req = &spans[i]
		case s.ParentSpanID == spanID:
			children = append(children, s)
		default:
			t.Errorf("stray span %+v", s)
		}
	}
	if req == nil {
		t.Fatalf("no span %s among %+v", spanID, spans)
	}
	slices.SortFunc(children, func(a, b jspan) int { return cmp.Compare(nanos(a.Start), nanos(b.Start)) })
	return *req, children
}
