package gateway

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/record"
)

const chatReq = `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
const streamReq = `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}`

const nonStreamBody = `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m-served","choices":[{"index":0,"message":{"role":"assistant","content":"Hello there"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":3,"total_tokens":12,"prompt_tokens_details":{"cached_tokens":4}}}`

type errResp struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

func decodeErr(t *testing.T, b []byte) errResp {
	t.Helper()
	var e errResp
	if err := json.Unmarshal(b, &e); err != nil || e.Error.Message == "" {
		t.Fatalf("not an OpenAI-style error: %s (%v)", b, err)
	}
	return e
}

func TestNonStreamed(t *testing.T) {
	up := newTranscriptUpstream(t, "")
	up.ctype, up.rawBody = "application/json", nonStreamBody
	tg := newTestGateway(t, testConfig(up.URL()))

	resp := post(t, tg.URL+"/v1/chat/completions", chatReq, nil)
	got := readAll(t, resp)
	if string(got) != nonStreamBody {
		t.Errorf("client body changed:\n got %s\nwant %s", got, nonStreamBody)
	}
	st := resp.Header.Get("Server-Timing")
	for _, k := range []string{"auth;dur=", "queue;dur=", "upstream;dur="} {
		if !strings.Contains(st, k) {
			t.Errorf("Server-Timing %q lacks %s", st, k)
		}
	}
	if resp.Header.Get("X-Request-Id") == "" {
		t.Error("no X-Request-Id echoed")
	}
	r := tg.next(t)
	want := record.Usage{InputTokens: 9, CachedInputTokens: 4, OutputTokens: 3, Source: record.SourceEngine}
	if r.Usage != want {
		t.Errorf("usage = %+v, want %+v", r.Usage, want)
	}
	if r.Status != 200 || r.FinishReason != "stop" || r.ServedModel != "m-served" || r.ErrorType != "" {
		t.Errorf("record = status %d finish %q served %q err %q", r.Status, r.FinishReason, r.ServedModel, r.ErrorType)
	}
	if r.RequestID != resp.Header.Get("X-Request-Id") {
		t.Errorf("record id %q != echoed id %q", r.RequestID, resp.Header.Get("X-Request-Id"))
	}
	if r.Derived.TPOT != nil {
		t.Error("TPOT set for a non-streamed request: the gateway cannot see its tokens apart")
	}
	checkInvariants(t, r)
	<-up.bodies
	if b := <-up.headers; b.Get("Traceparent") == "" {
		t.Error("no traceparent sent upstream")
	}
}

func TestTraceparentContinued(t *testing.T) {
	up := newTranscriptUpstream(t, "")
	up.ctype, up.rawBody = "application/json", nonStreamBody
	tg := newTestGateway(t, testConfig(up.URL()))
	const tid = "4bf92f3577b34da6a3ce929d0e0e4736"
	resp := post(t, tg.URL+"/v1/chat/completions", chatReq, map[string]string{
		"Traceparent": "00-" + tid + "-00f067aa0ba902b7-01", "X-Request-Id": "client-id-1",
	})
	readAll(t, resp)
	r := tg.next(t)
	<-up.bodies
	h := <-up.headers
	if r.TraceID != tid {
		t.Errorf("trace id = %q, want the client's %q", r.TraceID, tid)
	}
	if want := "00-" + tid + "-" + r.SpanID + "-01"; h.Get("Traceparent") != want {
		t.Errorf("upstream traceparent = %q, want %q (gateway span as parent)", h.Get("Traceparent"), want)
	}
	// The client's span is the gateway span's parent: trace export makes
	// the gateway's span its child, not a second root beside it.
	if r.ParentSpanID != "00f067aa0ba902b7" || r.SpanID == r.ParentSpanID {
		t.Errorf("parent span id = %q (span %q), want the client's 00f067aa0ba902b7", r.ParentSpanID, r.SpanID)
	}
	if r.ResponseID != "chatcmpl-1" {
		t.Errorf("response id = %q, want the engine's chatcmpl-1", r.ResponseID)
	}
	if r.ClientRequestID != "client-id-1" || resp.Header.Get("X-Request-Id") != "client-id-1" {
		t.Errorf("client request id not kept: record %q, echoed %q", r.ClientRequestID, resp.Header.Get("X-Request-Id"))
	}
}

// TestGeneratedIDs: tollgate's request id and, without a client
// traceparent, its trace id lead with the arrival time (Unix ms and s), so
// the ledger's indexes grow at their right edge; the trace goes upstream
// as a valid W3C traceparent.
func TestGeneratedIDs(t *testing.T) {
	up := newTranscriptUpstream(t, "")
	up.ctype, up.rawBody = "application/json", nonStreamBody
	tg := newTestGateway(t, testConfig(up.URL()))
	resp := post(t, tg.URL+"/v1/chat/completions", chatReq, nil)
	readAll(t, resp)
	r := tg.next(t)
	<-up.bodies
	h := <-up.headers

	id := r.RequestID
	if len(id) != 32 || !strings.HasPrefix(id, "req_") || !isLowerHex(id[4:]) {
		t.Fatalf("request id %q: want req_ + 28 lower-case hex digits", id)
	}
	if ms, _ := strconv.ParseUint(id[4:16], 16, 64); int64(ms) != r.Arrival.UnixMilli() {
		t.Errorf("request id %q leads with %d ms, want the arrival's %d", id, ms, r.Arrival.UnixMilli())
	}
	if resp.Header.Get(TollgateRequestIDHeader) != id || r.LogicalRequestID != id {
		t.Errorf("header %q, logical id %q, want the record's %q", resp.Header.Get(TollgateRequestIDHeader), r.LogicalRequestID, id)
	}

	tid := r.TraceID
	if len(tid) != 32 || !isLowerHex(tid) || strings.Trim(tid, "0") == "" {
		t.Fatalf("trace id %q: want 32 lower-case hex digits, not all zeros", tid)
	}
	if s, _ := strconv.ParseUint(tid[:8], 16, 32); int64(s) != r.Arrival.Unix() {
		t.Errorf("trace id %q leads with %d s, want the arrival's %d", tid, s, r.Arrival.Unix())
	}
	tp := h.Get("Traceparent")
	if want := "00-" + tid + "-" + r.SpanID + "-01"; tp != want {
		t.Errorf("upstream traceparent = %q, want %q", tp, want)
	}
	if _, ok := parseTraceparent(tp); !ok {
		t.Errorf("upstream traceparent %q is not valid W3C", tp)
	}
	if r.ParentSpanID != "" {
		t.Errorf("parent span %q for a trace started here", r.ParentSpanID)
	}
}

// TestRequestIDsUniqueAndOrdered: within one millisecond only the random
// part tells ids apart, and it must (replicas share no counter); across
// milliseconds the ids sort by time.
func TestRequestIDsUniqueAndOrdered(t *testing.T) {
	at := time.Now()
	seen := make(map[string]bool, 100000)
	for range 100000 {
		id := newRequestID(at)
		if seen[id] {
			t.Fatalf("id %q made twice", id)
		}
		seen[id] = true
	}
	prev := newRequestID(at)
	for i := range 1000 {
		next := newRequestID(at.Add(time.Duration(i+1) * time.Millisecond))
		if next <= prev {
			t.Fatalf("id %q, made %d ms later, sorts before %q", next, i+1, prev)
		}
		prev = next
	}
	if a, b := newTrace(at).TraceID, newTrace(at.Add(time.Second)).TraceID; a >= b {
		t.Errorf("trace id %q, started a second later, sorts before %q", b, a)
	}
}

// TestResponseIDBounded: the engine's id of its answer is kept as a
// client's identifiers are, valid UTF-8 of at most MaxIdentifier bytes,
// for the engine is no more trusted to keep it short.
func TestResponseIDBounded(t *testing.T) {
	up := newTranscriptUpstream(t, "")
	long := strings.Repeat("é", 200) + "\xff"
	up.ctype, up.rawBody = "application/json", strings.Replace(nonStreamBody, `"id":"chatcmpl-1"`, `"id":"`+long+`"`, 1)
	tg := newTestGateway(t, testConfig(up.URL()))
	readAll(t, post(t, tg.URL+"/v1/chat/completions", chatReq, nil))
	r := tg.next(t)
	if want := strings.Repeat("é", MaxIdentifier/2); r.ResponseID != want {
		t.Errorf("response id of %d bytes kept as %d bytes %q, want the first %d", len(long), len(r.ResponseID), r.ResponseID, len(want))
	}
}

func TestAuth(t *testing.T) {
	up := newTranscriptUpstream(t, "")
	up.ctype, up.rawBody = "application/json", nonStreamBody
	cfg := testConfig(up.URL())
	cfg.Auth.Keys = []config.Key{{KeySHA256: config.HashKey("sk-alice"), UserID: "alice", BizLine: "search", Team: "core"}}
	cfg.Upstreams[0].APIKey = "sk-upstream"
	tg := newTestGateway(t, cfg)

	for _, tc := range []struct{ name, auth string }{{"missing", ""}, {"wrong", "Bearer sk-bob"}} {
		resp := post(t, tg.URL+"/v1/chat/completions", chatReq, map[string]string{"Authorization": tc.auth})
		b := readAll(t, resp)
		if resp.StatusCode != 401 {
			t.Errorf("%s key: status %d, want 401", tc.name, resp.StatusCode)
		}
		if e := decodeErr(t, b); *e.Error.Code != "invalid_api_key" {
			t.Errorf("%s key: code %q", tc.name, *e.Error.Code)
		}
		r := tg.next(t)
		if r.Status != 401 || r.ErrorType != record.ErrAuth {
			t.Errorf("%s key recorded as %d %q", tc.name, r.Status, r.ErrorType)
		}
	}

	resp := post(t, tg.URL+"/v1/chat/completions", chatReq, map[string]string{"Authorization": "Bearer sk-alice", "X-Tollgate-Biz": "spoofed"})
	readAll(t, resp)
	r := tg.next(t)
	if r.UserID != "alice" || r.BizLine != "search" || r.Team != "core" || r.KeyID != config.HashKey("sk-alice")[:12] {
		t.Errorf("identity = user %q biz %q team %q key %q", r.UserID, r.BizLine, r.Team, r.KeyID)
	}
	<-up.bodies
	if got := (<-up.headers).Get("Authorization"); got != "Bearer sk-upstream" {
		t.Errorf("upstream Authorization = %q, want the upstream's own key, never the client's", got)
	}
}

func TestOpenGatewayIdentity(t *testing.T) {
	up := newTranscriptUpstream(t, "")
	up.ctype, up.rawBody = "application/json", nonStreamBody
	tg := newTestGateway(t, testConfig(up.URL()))
	readAll(t, post(t, tg.URL+"/v1/chat/completions", chatReq, nil))
	if r := tg.next(t); r.UserID != "anonymous" {
		t.Errorf("no key: user %q, want anonymous", r.UserID)
	}
	readAll(t, post(t, tg.URL+"/v1/chat/completions", chatReq, map[string]string{"Authorization": "Bearer sk-x", "X-Tollgate-Biz": "ads"}))
	r := tg.next(t)
	if want := "key-" + config.HashKey("sk-x")[:12]; r.UserID != want || r.BizLine != "ads" {
		t.Errorf("open mode: user %q biz %q, want %q ads", r.UserID, r.BizLine, want)
	}
	// Open gateway, no upstream key: the client's credentials pass through.
	<-up.bodies
	<-up.headers
	<-up.bodies
	if got := (<-up.headers).Get("Authorization"); got != "Bearer sk-x" {
		t.Errorf("pass-through Authorization = %q", got)
	}
}

func TestBadRequests(t *testing.T) {
	up := newTranscriptUpstream(t, "")
	cfg := testConfig(up.URL())
	cfg.Limits.MaxRequestBytes = 1024
	tg := newTestGateway(t, cfg)
	cases := []struct {
		name, path, body string
		status           int
		param            string
	}{
		{"not json", "/v1/chat/completions", `{"model":`, 400, ""},
		{"stream wrong type", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"x"}],"stream":"yes"}`, 400, "stream"},
		{"max_tokens wrong type", "/v1/chat/completions", `{"model":"m","messages":[],"max_tokens":"ten"}`, 400, "max_tokens"},
		{"no model", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}]}`, 400, "model"},
		{"no messages", "/v1/chat/completions", `{"model":"m"}`, 400, "messages"},
		{"empty messages", "/v1/chat/completions", `{"model":"m","messages":[]}`, 400, "messages"},
		{"no prompt", "/v1/completions", `{"model":"m"}`, 400, "prompt"},
		{"streamed embeddings", "/v1/embeddings", `{"model":"m","input":"x","stream":true}`, 400, "stream"},
		{"too large", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", 2000) + `"}]}`, 413, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp := post(t, tg.URL+tc.path, tc.body, nil)
			b := readAll(t, resp)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, b)
			}
			e := decodeErr(t, b)
			if tc.param != "" && (e.Error.Param == nil || *e.Error.Param != tc.param) {
				t.Errorf("param = %v, want %q (message %q)", e.Error.Param, tc.param, e.Error.Message)
			}
			r := tg.next(t)
			if r.Status != tc.status || r.ErrorType != record.ErrInvalidRequest {
				t.Errorf("recorded %d %q", r.Status, r.ErrorType)
			}
		})
	}
	select {
	case b := <-up.bodies:
		t.Errorf("a bad request reached the upstream: %s", b)
	default:
	}
}

func TestRoutingAndModels(t *testing.T) {
	a := newTranscriptUpstream(t, "")
	a.ctype, a.rawBody = "application/json", nonStreamBody
	b := newTranscriptUpstream(t, "")
	b.ctype, b.rawBody = "application/json", nonStreamBody
	cfg := testConfig(a.URL())
	cfg.Upstreams = []config.Upstream{
		{Name: "a", URL: a.URL(), Engine: "vllm", Models: []string{"llama"}},
		{Name: "b", URL: b.URL(), Engine: "sglang", Models: []string{"qwen", "qwen-long"}},
	}
	tg := newTestGateway(t, cfg)

	readAll(t, post(t, tg.URL+"/v1/chat/completions", `{"model":"qwen","messages":[{"role":"user","content":"x"}]}`, nil))
	if r := tg.next(t); r.Upstream != "b" || r.Engine != "sglang" {
		t.Errorf("qwen routed to %q (%q), want b", r.Upstream, r.Engine)
	}
	resp := post(t, tg.URL+"/v1/chat/completions", `{"model":"gpt-9","messages":[{"role":"user","content":"x"}]}`, nil)
	body := readAll(t, resp)
	if resp.StatusCode != 404 || *decodeErr(t, body).Error.Code != "model_not_found" {
		t.Errorf("unknown model: %d %s", resp.StatusCode, body)
	}
	if r := tg.next(t); r.ErrorType != record.ErrNoRoute {
		t.Errorf("unknown model recorded as %q", r.ErrorType)
	}

	mresp, err := http.Get(tg.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var list modelList
	if err := json.Unmarshal(readAll(t, mresp), &list); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range list.Data {
		ids = append(ids, m.ID)
	}
	if strings.Join(ids, ",") != "llama,qwen,qwen-long" {
		t.Errorf("/v1/models = %v", ids)
	}
}

func TestModelsFromSingleUpstream(t *testing.T) {
	const upList = `{"object":"list","data":[{"id":"Qwen/Qwen3-8B","object":"model","owned_by":"vllm"}]}`
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/models" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, upList)
	}))
	defer up.Close()
	tg := newTestGateway(t, testConfig(up.URL+"/v1"))
	resp, err := http.Get(tg.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, resp); string(got) != upList {
		t.Errorf("/v1/models = %s, want the upstream's own list", got)
	}
}

func TestRetries(t *testing.T) {
	// The first upstream fails before any byte; the second answers. Each
	// attempt is its own Record sharing the logical request id.
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(503)
		_, _ = io.WriteString(w, `{"error":{"message":"overloaded"}}`)
	}))
	defer failing.Close()
	refused := closedPortURL(t)
	good := newTranscriptUpstream(t, "")
	good.ctype, good.rawBody = "application/json", nonStreamBody

	for _, tc := range []struct {
		name, first string
		wantType    string
		wantStatus  int
	}{
		{"503", failing.URL + "/v1", record.ErrUpstreamStatus, 503},
		{"connect refused", refused, record.ErrConnect, 502},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(good.URL())
			cfg.Upstreams = []config.Upstream{
				{Name: "first", URL: tc.first, Engine: "vllm", Models: []string{"m"}},
				{Name: "second", URL: good.URL(), Engine: "vllm", Models: []string{"m"}},
			}
			tg := newTestGateway(t, cfg)
			// The router rotates its starting upstream; send until one
			// request starts at "first".
			const caller = "00f067aa0ba902b7"
			for range 4 {
				resp := post(t, tg.URL+"/v1/chat/completions", chatReq, map[string]string{
					"Traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-" + caller + "-01"})
				if b := readAll(t, resp); resp.StatusCode != 200 {
					t.Fatalf("status %d: %s", resp.StatusCode, b)
				}
				r1 := tg.next(t)
				if r1.Upstream == "second" {
					continue
				}
				r2 := tg.next(t)
				if r1.Attempt != 1 || r1.Status != tc.wantStatus || r1.ErrorType != tc.wantType {
					t.Errorf("attempt 1 = #%d %d %q, want #1 %d %q", r1.Attempt, r1.Status, r1.ErrorType, tc.wantStatus, tc.wantType)
				}
				if r2.Attempt != 2 || r2.Retries != 1 || r2.Upstream != "second" || r2.Status != 200 {
					t.Errorf("attempt 2 = #%d retries %d on %q status %d", r2.Attempt, r2.Retries, r2.Upstream, r2.Status)
				}
				if r1.LogicalRequestID != r2.LogicalRequestID || r1.RequestID == r2.RequestID {
					t.Errorf("ids: %q/%q and %q/%q", r1.RequestID, r1.LogicalRequestID, r2.RequestID, r2.LogicalRequestID)
				}
				// Each attempt is its own span, a child of the caller's.
				if r1.ParentSpanID != caller || r2.ParentSpanID != caller || r1.SpanID == r2.SpanID {
					t.Errorf("spans %s and %s, parents %q and %q: want two spans under %s", r1.SpanID, r2.SpanID, r1.ParentSpanID, r2.ParentSpanID, caller)
				}
				if r1.Usage.Total() != 0 || r2.Usage.Total() != 12 {
					t.Errorf("usage: failed attempt %d, good attempt %d tokens", r1.Usage.Total(), r2.Usage.Total())
				}
				tg.noMore(t)
				return
			}
			t.Fatal("no request started at the failing upstream")
		})
	}
}

func closedPortURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr + "/v1"
}

func TestTimeouts(t *testing.T) {
	role := `data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}` + "\n\n"
	tok := `data: {"choices":[{"index":0,"delta":{"content":" a"}}]}` + "\n\n"
	cases := []struct {
		name       string
		events     []string
		set        func(*config.Timeouts)
		wantType   string
		wantTokens int64
	}{
		{"first token", []string{role}, func(tt *config.Timeouts) { tt.FirstToken = 50 * time.Millisecond }, record.ErrFirstTokenTimeout, 0},
		{"idle", []string{role, tok, tok}, func(tt *config.Timeouts) { tt.Idle = 50 * time.Millisecond }, record.ErrIdleTimeout, 2},
		{"total", []string{role, tok}, func(tt *config.Timeouts) { tt.Total = 100 * time.Millisecond }, record.ErrTotalTimeout, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			up := newTranscriptUpstream(t, "")
			up.events, up.holdOpen = tc.events, true
			cfg := testConfig(up.URL())
			tc.set(&cfg.Upstreams[0].Timeouts)
			tg := newTestGateway(t, cfg)
			resp := post(t, tg.URL+"/v1/chat/completions", streamReq, nil)
			b := readAll(t, resp)
			if resp.StatusCode != 200 || !strings.Contains(string(b), `"code":"`+tc.wantType+`"`) {
				t.Errorf("client saw %d %s; want the stream to end with a %s error event", resp.StatusCode, b, tc.wantType)
			}
			r := tg.next(t)
			if r.Status != 504 || r.ErrorType != tc.wantType || r.Usage.OutputTokens != tc.wantTokens {
				t.Errorf("recorded %d %q with %d output tokens; want 504 %q %d", r.Status, r.ErrorType, r.Usage.OutputTokens, tc.wantType, tc.wantTokens)
			}
			checkInvariants(t, r)
		})
	}
}

func TestClientDisconnectMidStream(t *testing.T) {
	// The upstream streams forever; the client reads three tokens and leaves.
	started := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		close(started)
		for i := 0; ; i++ {
			if _, err := io.WriteString(w, `data: {"choices":[{"index":0,"delta":{"content":" x"}}]}`+"\n\n"); err != nil {
				return
			}
			if rc.Flush() != nil {
				return
			}
			select {
			case <-r.Context().Done():
				return
			case <-time.After(time.Millisecond): // pacing of the fake engine, not synchronisation
			}
		}
	}))
	defer up.Close()
	tg := newTestGateway(t, testConfig(up.URL+"/v1"))

	resp := post(t, tg.URL+"/v1/chat/completions", streamReq, nil)
	<-started
	br := bufio.NewReader(resp.Body)
	for n := 0; n < 3; {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(line, "data: ") {
			n++
		}
	}
	resp.Body.Close()

	r := tg.next(t)
	if r.Status != record.StatusClientClosed || r.ErrorType != record.ErrClientDisconnect || !r.ClientDisconnect {
		t.Errorf("recorded %d %q disconnect=%v, want 499 client_disconnect", r.Status, r.ErrorType, r.ClientDisconnect)
	}
	if r.Usage.OutputTokens < 3 || r.Usage.Source != record.SourceChunks {
		t.Errorf("partial usage = %+v, want ≥3 output tokens counted from chunks", r.Usage)
	}
	checkInvariants(t, r)
}

func TestMetricsExposed(t *testing.T) {
	up := newTranscriptUpstream(t, "")
	up.ctype, up.rawBody = "application/json", nonStreamBody
	cfg := testConfig(up.URL())
	cfg.Upstreams[0].Models = []string{"m"}
	tg := newTestGateway(t, cfg)
	readAll(t, post(t, tg.URL+"/v1/chat/completions", chatReq, map[string]string{"X-Tollgate-Biz": "search"}))
	tg.next(t)
	for typ, want := range map[string]float64{"input": 9, "cached": 4, "output": 3} {
		got := metricValue(t, tg, "tollgate_tokens_total", map[string]string{"type": typ, "model": "m", "biz_line": "search", "upstream": "up"})
		if got != want {
			t.Errorf("tollgate_tokens_total{type=%q} = %v, want %v", typ, got, want)
		}
	}
	if got := metricValue(t, tg, "tollgate_requests_total", map[string]string{"status": "200", "finish_reason": "stop"}); got != 1 {
		t.Errorf("tollgate_requests_total = %v, want 1", got)
	}
	if n, err := testutil.GatherAndCount(tg.Reg, "gen_ai_server_request_duration_seconds"); err != nil || n != 1 {
		t.Errorf("request duration series = %d (%v), want 1", n, err)
	}
}

// metricValue sums a counter's series whose labels include want.
func metricValue(t *testing.T, tg *testGateway, name string, want map[string]string) float64 {
	t.Helper()
	mfs, err := tg.Reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			for k, v := range want {
				if labels[k] != v {
					continue next
				}
			}
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}
