package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/sim"
	"github.com/tollgate-dev/tollgate/internal/store"
	"github.com/tollgate-dev/tollgate/internal/store/sqlite"
)

// The agent APIs end to end: a client → tollgate → the simulator, which
// speaks OpenAI's Responses and Anthropic's Messages dialects. The test
// reads the usage the client received with its own decoding (not
// internal/usage), and checks the Record — as stored in a real SQLite
// ledger and read back — against it.

// agentVolatile are the fields two identical simulators answer
// differently: timestamps, and ids (the engine takes its request id from
// X-Request-Id, which tollgate sets to its own; signatures are made from
// them).
var agentVolatile = regexp.MustCompile(`"(created_at|created|completed_at|\w*id|signature)":(\d+|"[^"]*")`)

// clientUsage is what the client saw of an answer: usage by the API's own
// rule, read independently of internal/usage.
type clientUsage struct {
	input, cached, cacheWrite, cacheWrite1h, output, reasoning int64
	stop                                                       string
	toolCalls                                                  int
}

// responsesUsage reads a Responses body or the last response object of a
// stream (response.completed / incomplete / failed).
func responsesUsage(t *testing.T, b []byte, stream bool) clientUsage {
	t.Helper()
	type resp struct {
		Status            string `json:"status"`
		IncompleteDetails *struct {
			Reason string `json:"reason"`
		} `json:"incomplete_details"`
		Output []struct {
			Type string `json:"type"`
		} `json:"output"`
		Usage struct {
			InputTokens        int64 `json:"input_tokens"`
			InputTokensDetails struct {
				CachedTokens int64 `json:"cached_tokens"`
			} `json:"input_tokens_details"`
			OutputTokens        int64 `json:"output_tokens"`
			OutputTokensDetails struct {
				ReasoningTokens int64 `json:"reasoning_tokens"`
			} `json:"output_tokens_details"`
		} `json:"usage"`
	}
	var r resp
	if !stream {
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatalf("responses body: %v\n%s", err, b)
		}
	} else {
		for _, d := range sseData(b) {
			var ev struct {
				Type     string `json:"type"`
				Response *resp  `json:"response"`
			}
			if json.Unmarshal(d, &ev) == nil && ev.Response != nil &&
				(ev.Type == "response.completed" || ev.Type == "response.incomplete" || ev.Type == "response.failed") {
				r = *ev.Response
			}
		}
	}
	u := clientUsage{input: r.Usage.InputTokens, cached: r.Usage.InputTokensDetails.CachedTokens, output: r.Usage.OutputTokens,
		reasoning: r.Usage.OutputTokensDetails.ReasoningTokens, stop: r.Status}
	for _, o := range r.Output {
		if o.Type == "function_call" {
			u.toolCalls++
		}
	}
	return u
}

type anthropicWireUsage struct {
	InputTokens              *int64 `json:"input_tokens"`
	CacheCreationInputTokens *int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     *int64 `json:"cache_read_input_tokens"`
	CacheCreation            *struct {
		Ephemeral1h *int64 `json:"ephemeral_1h_input_tokens"`
	} `json:"cache_creation"`
	OutputTokens *int64 `json:"output_tokens"`
}

// messagesUsage reads a Messages body, or a stream: the last value of
// each count over message_start and message_delta; input is
// input_tokens + cache writes + cache reads.
func messagesUsage(t *testing.T, b []byte, stream bool) clientUsage {
	t.Helper()
	var in, cw, cr, cw1h, out int64
	var u clientUsage
	take := func(w *anthropicWireUsage) {
		for _, p := range []struct {
			src *int64
			dst *int64
		}{{w.InputTokens, &in}, {w.CacheCreationInputTokens, &cw}, {w.CacheReadInputTokens, &cr}, {w.OutputTokens, &out}} {
			if p.src != nil {
				*p.dst = *p.src
			}
		}
		if w.CacheCreation != nil && w.CacheCreation.Ephemeral1h != nil {
			cw1h = *w.CacheCreation.Ephemeral1h
		}
	}
	type block struct {
		Type string `json:"type"`
	}
	if !stream {
		var m struct {
			StopReason string             `json:"stop_reason"`
			Content    []block            `json:"content"`
			Usage      anthropicWireUsage `json:"usage"`
		}
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("messages body: %v\n%s", err, b)
		}
		take(&m.Usage)
		u.stop = m.StopReason
		for _, c := range m.Content {
			if c.Type == "tool_use" {
				u.toolCalls++
			}
		}
	} else {
		for _, d := range sseData(b) {
			var ev struct {
				Type    string `json:"type"`
				Message *struct {
					Usage anthropicWireUsage `json:"usage"`
				} `json:"message"`
				ContentBlock *block `json:"content_block"`
				Delta        *struct {
					StopReason string `json:"stop_reason"`
				} `json:"delta"`
				Usage *anthropicWireUsage `json:"usage"`
			}
			if json.Unmarshal(d, &ev) != nil {
				continue
			}
			switch ev.Type {
			case "message_start":
				take(&ev.Message.Usage)
			case "content_block_start":
				if ev.ContentBlock.Type == "tool_use" {
					u.toolCalls++
				}
			case "message_delta":
				take(ev.Usage)
				u.stop = ev.Delta.StopReason
			}
		}
	}
	u.input, u.cached, u.cacheWrite, u.cacheWrite1h, u.output = in+cw+cr, cr, cw, cw1h, out
	return u
}

// sseData is the data of each event of an SSE body.
func sseData(b []byte) [][]byte {
	var out [][]byte
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if d, ok := bytes.CutPrefix(sc.Bytes(), []byte("data: ")); ok {
			out = append(out, bytes.Clone(d))
		}
	}
	return out
}

// ledger is a real SQLite ledger in the test's directory.
func ledger(t *testing.T) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "ledger.db"), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// stored writes r to the ledger and reads it back.
func stored(t *testing.T, s *sqlite.Store, r *record.Record) *record.Record {
	t.Helper()
	if err := s.Insert(t.Context(), store.Batch{Records: []*record.Record{r}}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Request(t.Context(), r.RequestID)
	if err != nil || len(got) != 1 {
		t.Fatalf("read back %s: %v (%d rows)", r.RequestID, err, len(got))
	}
	return got[0]
}

// cachedSystem is a Messages system prompt long enough to be cached, with
// a 1-hour breakpoint.
var cachedSystem = `[{"type":"text","text":"` + strings.Repeat("You are a careful assistant for a shoe shop. ", 200) +
	`","cache_control":{"type":"ephemeral","ttl":"1h"}}]`

const weatherFunction = `{"type":"function","name":"get_weather","description":"Weather","parameters":{"type":"object","required":["city"],"properties":{"city":{"type":"string"}}}}`
const weatherTool = `{"name":"get_weather","description":"Weather","input_schema":{"type":"object","required":["city"],"properties":{"city":{"type":"string"}}}}`

// TestAgentAPIsThroughSim: Responses and Messages, streamed and not, with
// text, a tool call, reasoning and cache reads and writes — the client
// gets the engine's bytes (those of an identical engine asked directly),
// and the stored Record has the usage the client saw, the first token,
// the finish reason (and the API's own), the tool calls and the end user.
func TestAgentAPIsThroughSim(t *testing.T) {
	behind := startSim(t, sim.Config{Seed: 5})
	direct := startSim(t, sim.Config{Seed: 5})
	tg := simGateway(t, behind)
	db := ledger(t)

	type tc struct {
		name, path, body string
		hdr              map[string]string
		wantFinish       string
		wantNative       string
		wantTools        int
		wantReasoning    bool
		wantCacheWrite   bool // messages: this request writes the cache
		wantCacheRead    bool
		endUser          string
	}
	tests := []tc{
		{name: "responses text", path: "/responses",
			body:       `{"model":"` + simModel + `","input":"Tell me about shoes.","safety_identifier":"cust-42","tool_choice":"none"}`,
			hdr:        map[string]string{sim.OutputTokensHeader: "23"},
			wantFinish: "stop", wantNative: "completed", endUser: "cust-42"},
		{name: "responses tool call", path: "/responses",
			body:       `{"model":"` + simModel + `","input":"Weather in Paris?","tools":[` + weatherFunction + `],"tool_choice":"required","metadata":{"user_id":"cust-7"}}`,
			hdr:        map[string]string{sim.OutputTokensHeader: "9"},
			wantFinish: "tool_calls", wantNative: "completed", wantTools: 1, endUser: "cust-7"},
		{name: "responses reasoning cut by max_output_tokens", path: "/responses",
			body:       `{"model":"` + simModel + `","input":"Think hard.","reasoning":{"effort":"high","summary":"auto"},"max_output_tokens":16}`,
			hdr:        map[string]string{sim.OutputTokensHeader: "40"},
			wantFinish: "length", wantNative: "incomplete/max_output_tokens", wantReasoning: true},
		{name: "messages text, cache write", path: "/messages",
			body:       `{"model":"` + simModel + `","max_tokens":256,"tools":[` + weatherTool + `],"system":` + cachedSystem + `,"messages":[{"role":"user","content":"Hello"}],"metadata":{"user_id":"cust-9"}}`,
			hdr:        map[string]string{sim.OutputTokensHeader: "17", "Anthropic-Version": "2023-06-01", sim.ToolCallHeader: "none"},
			wantFinish: "stop", wantNative: "end_turn", wantCacheWrite: true, endUser: "cust-9"},
		{name: "messages tool call, cache read", path: "/messages",
			body:       `{"model":"` + simModel + `","max_tokens":256,"system":` + cachedSystem + `,"tools":[` + weatherTool + `],"tool_choice":{"type":"any"},"messages":[{"role":"user","content":"Weather in Rome?"}]}`,
			hdr:        map[string]string{sim.OutputTokensHeader: "8"},
			wantFinish: "tool_calls", wantNative: "tool_use", wantTools: 1, wantCacheRead: true},
		{name: "messages thinking", path: "/messages",
			body:       `{"model":"` + simModel + `","max_tokens":2048,"thinking":{"type":"enabled","budget_tokens":1024},"messages":[{"role":"user","content":"Think."}]}`,
			hdr:        map[string]string{sim.OutputTokensHeader: "30"},
			wantFinish: "stop", wantNative: "end_turn", wantReasoning: true},
	}
	for _, stream := range []bool{false, true} {
		for _, tt := range tests {
			name := tt.name
			body := tt.body
			if stream {
				name += " streamed"
				body = strings.TrimSuffix(body, "}") + `,"stream":true}`
			}
			t.Run(name, func(t *testing.T) {
				resp := post(t, tg.URL+"/v1"+tt.path, body, tt.hdr)
				got := readAll(t, resp)
				want := readAll(t, post(t, direct.URL+tt.path, body, tt.hdr))
				if resp.StatusCode != 200 {
					t.Fatalf("status %d: %s", resp.StatusCode, got)
				}
				norm := func(b []byte) string { return agentVolatile.ReplaceAllString(string(b), `"$1":_`) }
				if diff := cmp.Diff(norm(want), norm(got)); diff != "" {
					t.Errorf("bytes through tollgate differ from the engine's (-engine +client):\n%s", diff)
				}
				var cu clientUsage
				if tt.path == "/responses" {
					cu = responsesUsage(t, got, stream)
				} else {
					cu = messagesUsage(t, got, stream)
				}
				r := stored(t, db, tg.next(t))
				wantU := record.Usage{InputTokens: cu.input, CachedInputTokens: cu.cached, CacheWriteTokens: cu.cacheWrite,
					CacheWrite1hTokens: cu.cacheWrite1h, OutputTokens: cu.output, ReasoningTokens: cu.reasoning,
					ToolCalls: cu.toolCalls, Source: record.SourceEngine}
				if tt.path == "/messages" {
					wantU.ReasoningTokens = r.Usage.ReasoningTokens // Anthropic reports no thinking count
				}
				if diff := cmp.Diff(wantU, r.Usage); diff != "" {
					t.Errorf("stored usage differs from what the client received (-client +ledger):\n%s", diff)
				}
				if r.Usage.OutputTokens == 0 || r.Usage.InputTokens == 0 {
					t.Errorf("empty usage %+v", r.Usage)
				}
				if r.Usage.ToolCalls != tt.wantTools {
					t.Errorf("tool calls %d, want %d", r.Usage.ToolCalls, tt.wantTools)
				}
				if tt.wantReasoning && tt.path == "/responses" && r.Usage.ReasoningTokens == 0 {
					t.Error("no reasoning tokens recorded")
				}
				if tt.wantCacheWrite && (r.Usage.CacheWriteTokens == 0 || r.Usage.CacheWrite1hTokens != r.Usage.CacheWriteTokens) && !stream {
					t.Errorf("cache write: %+v, want a 1h write", r.Usage)
				}
				if tt.wantCacheRead && r.Usage.CachedInputTokens == 0 {
					t.Errorf("cache read: %+v, want cached input", r.Usage)
				}
				if r.FinishReason != tt.wantFinish || r.NativeFinish != tt.wantNative || cu.stop == "" {
					t.Errorf("finish %q (native %q), want %q (%q); client saw %q", r.FinishReason, r.NativeFinish, tt.wantFinish, tt.wantNative, cu.stop)
				}
				if r.EndUser != tt.endUser {
					t.Errorf("end user %q, want %q", r.EndUser, tt.endUser)
				}
				if r.Endpoint != strings.TrimPrefix(tt.path, "/") || r.Stream != stream || r.Status != 200 || r.ErrorType != "" {
					t.Errorf("endpoint %q stream %v status %d error %q", r.Endpoint, r.Stream, r.Status, r.ErrorType)
				}
				if r.Derived.TTFT == nil || *r.Derived.TTFT <= 0 || *r.Derived.TTFT > r.Derived.E2E {
					t.Errorf("TTFT %v, E2E %v", r.Derived.TTFT, r.Derived.E2E)
				}
				if stream && (r.ContentChunks == 0 || r.Marks.FirstUpstreamToken < r.Marks.UpstreamHeaders || len(r.Timeline) == 0) {
					t.Errorf("stream: %d content events, first upstream token %v before headers %v, timeline %v",
						r.ContentChunks, r.Marks.FirstUpstreamToken, r.Marks.UpstreamHeaders, r.Timeline)
				}
				if r.ResponseBytes != int64(len(got)) {
					t.Errorf("response bytes %d, client got %d", r.ResponseBytes, len(got))
				}
				checkInvariants(t, r)
			})
		}
	}
}

// TestAgentStreamCut: a stream cut by the engine (reset) or left by the
// client keeps the tokens consumed so far: Messages its message_start
// input with the output events counted, Responses the output events.
func TestAgentStreamCut(t *testing.T) {
	se := startSim(t, sim.Config{})
	tg := simGateway(t, se)
	bodies := map[string]string{
		"/responses": `{"model":"` + simModel + `","input":"Long answer please.","stream":true,"tool_choice":"none"}`,
		"/messages":  `{"model":"` + simModel + `","max_tokens":512,"stream":true,"messages":[{"role":"user","content":"Long answer please."}]}`,
	}
	for path, body := range bodies {
		t.Run("upstream reset "+path, func(t *testing.T) {
			resp := post(t, tg.URL+"/v1"+path, body, map[string]string{sim.OutputTokensHeader: "40", sim.FaultHeader: "reset-after=7"})
			got := readAll(t, resp)
			r := tg.next(t)
			if r.ErrorType != record.ErrUpstreamReset || r.Status != 502 {
				t.Errorf("error %q status %d, want upstream_reset 502", r.ErrorType, r.Status)
			}
			if r.Usage.OutputTokens != 7 || r.ContentChunks != 7 {
				t.Errorf("output %d over %d events, want the 7 consumed", r.Usage.OutputTokens, r.ContentChunks)
			}
			if path == "/messages" {
				if r.Usage.Source != record.SourceMerged || r.Usage.InputTokens == 0 {
					t.Errorf("usage %+v: want message_start's input, the output counted (merged)", r.Usage)
				}
				if !bytes.Contains(got, []byte(`event: error`)) || !bytes.Contains(got, []byte(`"type":"error"`)) {
					t.Errorf("the client was not told the stream broke, in Anthropic's shape:\n%s", tail(got))
				}
			} else {
				// No usage came: the model's tokenizer counts the prompt
				// (instructions and input through the chat template) and
				// the deltas streamed, as for a cut chat stream.
				chat, err := responsesAsChat([]byte(body))
				if err != nil {
					t.Fatal(err)
				}
				wantIn, err := qwen3(t).ChatPromptTokens(chat)
				if err != nil {
					t.Fatal(err)
				}
				if r.Usage.Source != record.SourceTokenizer || r.Usage.InputTokens != int64(wantIn) || !r.Usage.InputKnown() {
					t.Errorf("usage %+v: want the tokenizer's count, %d input tokens", r.Usage, wantIn)
				}
				if !bytes.Contains(got, []byte(`"type":"error","code":"upstream_reset"`)) {
					t.Errorf("the client was not told the stream broke:\n%s", tail(got))
				}
			}
			if r.Derived.TTFT == nil {
				t.Error("no TTFT for a stream that produced tokens")
			}
		})
		t.Run("client gone "+path, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, tg.URL+"/v1"+path, strings.NewReader(body))
			req.Header.Set(sim.OutputTokensHeader, "2000")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			// Read until three output deltas arrived, then leave.
			br := bufio.NewReader(resp.Body)
			deltas := 0
			for deltas < 3 {
				line, err := br.ReadString('\n')
				if err != nil {
					t.Fatalf("stream ended after %d deltas: %v", deltas, err)
				}
				if strings.HasPrefix(line, "data: ") && (strings.Contains(line, "output_text.delta") || strings.Contains(line, "text_delta")) {
					deltas++
				}
			}
			cancel()
			resp.Body.Close()
			r := tg.next(t)
			if r.Status != record.StatusClientClosed || !r.ClientDisconnect {
				t.Errorf("status %d disconnect %v, want 499", r.Status, r.ClientDisconnect)
			}
			if r.Usage.OutputTokens < 3 || r.Usage.OutputTokens >= 2000 || int64(r.ContentChunks) != r.Usage.OutputTokens {
				t.Errorf("output %d over %d events: want what was streamed before the client left", r.Usage.OutputTokens, r.ContentChunks)
			}
			if path == "/messages" && r.Usage.InputTokens == 0 {
				t.Errorf("message_start's input lost: %+v", r.Usage)
			}
		})
	}
}

func tail(b []byte) []byte { return b[max(0, len(b)-400):] }
