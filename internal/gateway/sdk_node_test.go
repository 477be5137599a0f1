package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/sim"
)

// The agent APIs through the vendors' own node SDKs (tools/sdkclients,
// pinned by its package-lock.json, installed by scripts/test.sh with npm
// ci): node runs a script of calls against tollgate in front of the
// simulator, and prints what each SDK reported. A tap between tollgate
// and the engine keeps the engine's bytes, so what the SDK ended with is
// compared with what the engine sent, not with a second engine.

const sdkClientsDir = "../../tools/sdkclients"

// nodeSDKs returns node and the scripts' directory, or skips the test
// naming what is missing.
func nodeSDKs(t *testing.T) (node, dir string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("the node SDK tests need node (20 or later): run scripts/test.sh, or install node and `cd tools/sdkclients && npm ci`")
	}
	dir, err = filepath.Abs(sdkClientsDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, pkg := range []string{"openai", "@anthropic-ai/sdk"} {
		if _, err := os.Stat(filepath.Join(dir, "node_modules", pkg, "package.json")); err != nil {
			t.Skipf("the node SDK tests need tools/sdkclients/node_modules/%s: run scripts/test.sh, or `cd tools/sdkclients && npm ci`", pkg)
		}
	}
	return node, dir
}

// upstreamTap is a reverse proxy in front of an engine that keeps the
// body of every answer, by the X-Request-Id tollgate sent with the
// request (its Record's RequestID). It flushes every write, as tollgate
// expects of an engine.
type upstreamTap struct {
	URL    string // …/v1
	mu     sync.Mutex
	bodies map[string]*syncBuffer
}

func startUpstreamTap(t testing.TB, upstream string) *upstreamTap {
	t.Helper()
	target, err := url.Parse(strings.TrimSuffix(upstream, "/v1"))
	if err != nil {
		t.Fatal(err)
	}
	tap := &upstreamTap{bodies: map[string]*syncBuffer{}}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.FlushInterval = -1
	rp.ModifyResponse = func(resp *http.Response) error {
		buf := &syncBuffer{}
		tap.mu.Lock()
		tap.bodies[resp.Request.Header.Get("X-Request-Id")] = buf
		tap.mu.Unlock()
		resp.Body = struct {
			io.Reader
			io.Closer
		}{io.TeeReader(resp.Body, buf), resp.Body}
		return nil
	}
	srv := httptest.NewServer(rp)
	t.Cleanup(srv.Close)
	tap.URL = srv.URL + "/v1"
	return tap
}

// body is what the engine answered to the request tollgate sent for r.
// The Record is made after tollgate read the whole answer, so the tap has
// it all by then.
func (tap *upstreamTap) body(t testing.TB, r *record.Record) []byte {
	t.Helper()
	tap.mu.Lock()
	buf := tap.bodies[r.RequestID]
	tap.mu.Unlock()
	if buf == nil {
		t.Fatalf("the tap saw no answer for request %s", r.RequestID)
	}
	return []byte(buf.String())
}

// sdkCall is one line of a script's output: what the SDK reported.
type sdkCall struct {
	Call  string `json:"call"`
	ID    string `json:"id"`
	Usage struct {
		Input         int64 `json:"input"`
		Cached        int64 `json:"cached"`
		Output        int64 `json:"output"`
		Reasoning     int64 `json:"reasoning"` // Anthropic: output_tokens_details.thinking_tokens
		CacheCreation int64 `json:"cache_creation"`
		CacheRead     int64 `json:"cache_read"`
	} `json:"usage"`
	sdkOutput
	Accumulated  []string `json:"accumulated"` // Responses streams: the accumulator's snapshots
	StopReason   string   `json:"stop_reason"`
	FirstDeltaMS *float64 `json:"first_delta_ms"`
	ElapsedMS    float64  `json:"elapsed_ms"`
}

// sdkOutput is the final output of an answer: its text, and its tool
// calls with their arguments as JSON text.
type sdkOutput struct {
	Text      string    `json:"text"`
	ToolCalls []sdkTool `json:"tool_calls"`
}

type sdkTool struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// runSDKScript runs a script of tools/sdkclients and returns its calls.
func runSDKScript(t *testing.T, node, dir, script string, args ...string) []sdkCall {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, append([]string{script}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "OPENAI_API_KEY=sk-sdk", "ANTHROPIC_API_KEY=sk-sdk",
		`SDK_HEADERS={"`+sim.OutputTokensHeader+`":"24"}`)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node %s: %v\n%s%s", script, err, out, stderr.Bytes())
	}
	var calls []sdkCall
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var c sdkCall
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatalf("node %s printed %q: %v", script, sc.Bytes(), err)
		}
		calls = append(calls, c)
	}
	return calls
}

// TestNodeSDKs: OpenAI's node SDK (responses.create, responses.stream)
// and Anthropic's (messages.create, messages.stream; text and a tool
// call; a cache write, then reads) through tollgate in front of the
// simulator. For each call, the Record in a real SQLite ledger has the
// tokens the SDK reported (Anthropic's input being input + cache writes +
// cache reads), a TTFT no later than the SDK's first delta, and the tool
// calls; and the SDK's final output — its stream accumulator's, for
// streams — is exactly what the engine's bytes spell.
func TestNodeSDKs(t *testing.T) {
	node, dir := nodeSDKs(t)
	se := startSim(t, sim.Config{Seed: 19})
	tap := startUpstreamTap(t, se.URL)
	cfg := testConfig(tap.URL)
	cfg.Upstreams[0].Models = []string{simModel}
	tg := newTestGateway(t, cfg)
	db := ledger(t)

	type want struct {
		stream, cacheWrite, cacheRead, reasoning bool
		tools                                    int
	}
	for _, tc := range []struct {
		script, base, endpoint string
		calls                  map[string]want
	}{
		{"openai.mjs", tg.URL + "/v1", endpointResponses, map[string]want{
			"responses.create":           {reasoning: true},
			"responses.stream":           {stream: true, reasoning: true, cacheRead: true},
			"responses.stream tool call": {stream: true, tools: 1},
		}},
		{"anthropic.mjs", tg.URL, endpointMessages, map[string]want{
			"messages.create":           {cacheWrite: true},
			"messages.create tool call": {cacheRead: true, tools: 1},
			"messages.stream":           {stream: true, cacheRead: true},
			"messages.stream tool call": {stream: true, cacheRead: true, tools: 1},
		}},
	} {
		t.Run(tc.script, func(t *testing.T) {
			calls := runSDKScript(t, node, dir, tc.script, tc.base, simModel)
			if len(calls) != len(tc.calls) {
				t.Fatalf("%d calls printed, want %d: %+v", len(calls), len(tc.calls), calls)
			}
			byID := map[string]*record.Record{}
			for range calls {
				r := stored(t, db, tg.next(t))
				byID[r.ResponseID] = r
			}
			for _, c := range calls {
				w, ok := tc.calls[c.Call]
				if !ok {
					t.Errorf("unexpected call %q", c.Call)
					continue
				}
				r := byID[c.ID]
				if r == nil {
					t.Errorf("%s: no Record with response id %q", c.Call, c.ID)
					continue
				}
				checkSDKCall(t, c, r, tap.body(t, r), tc.endpoint, w.stream)

				u := r.Usage
				if (u.CacheWriteTokens > 0) != w.cacheWrite || (u.CachedInputTokens > 0) != w.cacheRead ||
					(u.ReasoningTokens > 0) != w.reasoning || u.ToolCalls != w.tools {
					t.Errorf("%s: usage %+v; want cache write %v, cache read %v, reasoning %v, %d tool calls",
						c.Call, u, w.cacheWrite, w.cacheRead, w.reasoning, w.tools)
				}
			}
		})
	}
	tg.noMore(t)
}

// checkSDKCall compares one call as the SDK reported it with its Record
// and with the engine's bytes.
func checkSDKCall(t *testing.T, c sdkCall, r *record.Record, upstream []byte, endpoint string, stream bool) {
	t.Helper()
	// Tokens: the Record's are the SDK's, by the API's own rule.
	want := record.Usage{InputTokens: c.Usage.Input, CachedInputTokens: c.Usage.Cached, OutputTokens: c.Usage.Output,
		ReasoningTokens: c.Usage.Reasoning, ToolCalls: len(c.ToolCalls), Source: record.SourceEngine}
	if endpoint == endpointMessages {
		want.InputTokens = c.Usage.Input + c.Usage.CacheCreation + c.Usage.CacheRead
		want.CachedInputTokens, want.CacheWriteTokens = c.Usage.CacheRead, c.Usage.CacheCreation
	}
	if diff := cmp.Diff(want, r.Usage); diff != "" {
		t.Errorf("%s: the ledger's usage differs from the SDK's (-SDK +ledger):\n%s", c.Call, diff)
	}
	if r.Usage.InputTokens == 0 || r.Usage.OutputTokens != 24 {
		t.Errorf("%s: usage %+v, want input and the 24 output tokens asked for", c.Call, r.Usage)
	}
	if r.Endpoint != endpoint || r.Stream != stream || r.Status != 200 || r.ErrorType != "" || r.EndUser != "cust-node" {
		t.Errorf("%s: endpoint %q stream %v status %d error %q end user %q", c.Call, r.Endpoint, r.Stream, r.Status, r.ErrorType, r.EndUser)
	}

	// Time: the gateway saw the first token before the SDK did.
	ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	limit := ms(c.ElapsedMS)
	if stream {
		if c.FirstDeltaMS == nil {
			t.Fatalf("%s: the SDK saw no delta", c.Call)
		}
		limit = ms(*c.FirstDeltaMS)
	}
	if r.Derived.TTFT == nil || *r.Derived.TTFT > limit {
		t.Errorf("%s: TTFT %v, the SDK's first delta (or, not streamed, its answer) after %v", c.Call, r.Derived.TTFT, limit)
	}

	// Output: what the SDK ended with is what the engine's bytes spell.
	var final sdkOutput
	var deltas []string
	switch {
	case endpoint == endpointResponses && stream:
		final, deltas = responsesStreamOutput(t, upstream)
	case endpoint == endpointResponses:
		final = responsesOutput(t, upstream)
	case stream:
		final = messagesStreamOutput(t, upstream)
	default:
		final = messagesOutput(t, upstream)
	}
	if diff := cmp.Diff(final, c.sdkOutput, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("%s: the SDK's final output differs from the engine's bytes (-engine +SDK):\n%s", c.Call, diff)
	}
	if final.Text == "" && len(final.ToolCalls) == 0 {
		t.Errorf("%s: the engine sent no output", c.Call)
	}
	if endpoint == endpointResponses && stream {
		// The final response is response.completed's; the SDK's
		// accumulator built its own from the deltas before that.
		if diff := cmp.Diff(deltas, c.Accumulated, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("%s: the SDK's accumulator differs from the engine's deltas (-engine +SDK):\n%s", c.Call, diff)
		}
	}
	if endpoint == endpointMessages {
		var m struct {
			StopReason string `json:"stop_reason"`
		}
		if !stream {
			_ = json.Unmarshal(upstream, &m)
			if m.StopReason != c.StopReason {
				t.Errorf("%s: SDK stop reason %q, the engine's %q", c.Call, c.StopReason, m.StopReason)
			}
		}
		if r.NativeFinish != c.StopReason {
			t.Errorf("%s: recorded native finish %q, the SDK's stop reason %q", c.Call, r.NativeFinish, c.StopReason)
		}
	}
}

type responsesBody struct {
	Output []struct {
		Type      string `json:"type"`
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
		Content   []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
	} `json:"output"`
}

func (b responsesBody) output() sdkOutput {
	var o sdkOutput
	for _, it := range b.Output {
		switch it.Type {
		case "message":
			for _, c := range it.Content {
				if c.Type == "output_text" {
					o.Text += c.Text
				}
			}
		case "function_call":
			o.ToolCalls = append(o.ToolCalls, sdkTool{it.Name, it.Arguments})
		}
	}
	return o
}

// responsesOutput reads the output of a Responses body.
func responsesOutput(t *testing.T, b []byte) sdkOutput {
	t.Helper()
	var r responsesBody
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("responses body: %v\n%s", err, b)
	}
	return r.output()
}

// responsesStreamOutput reads a Responses stream: the output of its
// response.completed, and the text and arguments its deltas add up to,
// per output item and part, in the order of their keys (as the script
// sorts its snapshots).
func responsesStreamOutput(t *testing.T, b []byte) (final sdkOutput, deltas []string) {
	t.Helper()
	byKey := map[string]string{}
	var keys []string
	completed := false
	for _, d := range sseData(b) {
		var ev struct {
			Type         string         `json:"type"`
			OutputIndex  int            `json:"output_index"`
			ContentIndex int            `json:"content_index"`
			Delta        string         `json:"delta"`
			Response     *responsesBody `json:"response"`
		}
		if err := json.Unmarshal(d, &ev); err != nil {
			t.Fatalf("responses event %s: %v", d, err)
		}
		key := ""
		switch ev.Type {
		case "response.output_text.delta":
			key = strconv.Itoa(ev.OutputIndex) + "/" + strconv.Itoa(ev.ContentIndex)
		case "response.function_call_arguments.delta":
			key = strconv.Itoa(ev.OutputIndex)
		case "response.completed":
			final, completed = ev.Response.output(), true
		}
		if key != "" {
			if _, ok := byKey[key]; !ok {
				keys = append(keys, key)
			}
			byKey[key] += ev.Delta
		}
	}
	if !completed {
		t.Fatalf("the engine's stream has no response.completed:\n%s", tail(b))
	}
	slices.Sort(keys)
	for _, k := range keys {
		deltas = append(deltas, byKey[k])
	}
	return final, deltas
}

// messagesOutput reads the output of a Messages body: text blocks joined,
// each tool_use block's input as compact JSON.
func messagesOutput(t *testing.T, b []byte) sdkOutput {
	t.Helper()
	var m struct {
		Content []struct {
			Type  string          `json:"type"`
			Text  string          `json:"text"`
			Name  string          `json:"name"`
			Input json.RawMessage `json:"input"`
		} `json:"content"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("messages body: %v\n%s", err, b)
	}
	var o sdkOutput
	for _, c := range m.Content {
		switch c.Type {
		case "text":
			o.Text += c.Text
		case "tool_use":
			o.ToolCalls = append(o.ToolCalls, sdkTool{c.Name, compactJSON(t, c.Input)})
		}
	}
	return o
}

// messagesStreamOutput reads a Messages stream as the SDK's accumulator
// should: each block's text_delta or input_json_delta pieces joined.
func messagesStreamOutput(t *testing.T, b []byte) sdkOutput {
	t.Helper()
	type block struct {
		typ, name string
		text      strings.Builder
	}
	var blocks []*block
	for _, d := range sseData(b) {
		var ev struct {
			Type         string `json:"type"`
			Index        int    `json:"index"`
			ContentBlock *struct {
				Type string `json:"type"`
				Name string `json:"name"`
			} `json:"content_block"`
			Delta *struct {
				Type        string `json:"type"`
				Text        string `json:"text"`
				PartialJSON string `json:"partial_json"`
			} `json:"delta"`
		}
		if err := json.Unmarshal(d, &ev); err != nil {
			t.Fatalf("messages event %s: %v", d, err)
		}
		switch ev.Type {
		case "content_block_start":
			if ev.Index != len(blocks) {
				t.Fatalf("block %d started after %d blocks", ev.Index, len(blocks))
			}
			blocks = append(blocks, &block{typ: ev.ContentBlock.Type, name: ev.ContentBlock.Name})
		case "content_block_delta":
			if ev.Index >= len(blocks) {
				t.Fatalf("a delta of block %d, which did not start", ev.Index)
			}
			blocks[ev.Index].text.WriteString(ev.Delta.Text + ev.Delta.PartialJSON)
		}
	}
	var o sdkOutput
	for _, bl := range blocks {
		switch bl.typ {
		case "text":
			o.Text += bl.text.String()
		case "tool_use":
			o.ToolCalls = append(o.ToolCalls, sdkTool{bl.name, compactJSON(t, []byte(bl.text.String()))})
		}
	}
	return o
}

// compactJSON is JSON text without insignificant space, as
// JSON.stringify writes what the SDK parsed.
func compactJSON(t *testing.T, b []byte) string {
	t.Helper()
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		t.Fatalf("tool input %q: %v", b, err)
	}
	return buf.String()
}
