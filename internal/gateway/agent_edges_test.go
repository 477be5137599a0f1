package gateway

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/sim"
)

// A Messages stream as Anthropic's newer API sends it: message_delta
// repeats the input and cache counts, cumulative. Taking the last value
// of each count gives input 10+200+1000, never the doubled sums.
const messagesRepeatedCounts = "event: message_start\n" +
	`data: {"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-x","content":[],"stop_reason":null,"usage":{"input_tokens":10,"cache_creation_input_tokens":200,"cache_read_input_tokens":1000,"cache_creation":{"ephemeral_5m_input_tokens":150,"ephemeral_1h_input_tokens":50},"output_tokens":1}}}` + "\n\n" +
	"event: content_block_start\n" + `data: {"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{}}}` + "\n\n" +
	"event: ping\n" + `data: {"type": "ping"}` + "\n\n" +
	"event: content_block_delta\n" + `data: {"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"city\":"}}` + "\n\n" +
	"event: content_block_delta\n" + `data: {"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"\"Rome\"}"}}` + "\n\n" +
	"event: content_block_stop\n" + `data: {"type":"content_block_stop","index":0}` + "\n\n" +
	"event: message_delta\n" + `data: {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"input_tokens":10,"cache_creation_input_tokens":200,"cache_read_input_tokens":1000,"output_tokens":12}}` + "\n\n" +
	"event: message_stop\n" + `data: {"type":"message_stop"}` + "\n\n"

// A Responses stream whose first output is a function call's start.
const responsesFunctionCall = "event: response.created\n" +
	`data: {"type":"response.created","sequence_number":0,"response":{"id":"resp_1","object":"response","status":"in_progress","model":"gpt-x","output":[],"usage":null}}` + "\n\n" +
	"event: response.output_item.added\n" +
	`data: {"type":"response.output_item.added","sequence_number":1,"output_index":0,"item":{"id":"fc_1","type":"function_call","status":"in_progress","arguments":"","call_id":"call_1","name":"get_weather"}}` + "\n\n" +
	"event: response.function_call_arguments.delta\n" +
	`data: {"type":"response.function_call_arguments.delta","sequence_number":2,"item_id":"fc_1","output_index":0,"delta":"{\"city\":\"Rome\"}"}` + "\n\n" +
	"event: response.completed\n" +
	`data: {"type":"response.completed","sequence_number":3,"response":{"id":"resp_1","object":"response","status":"completed","model":"gpt-x","output":[{"id":"fc_1","type":"function_call","status":"completed","arguments":"{\"city\":\"Rome\"}","call_id":"call_1","name":"get_weather"}],"usage":{"input_tokens":50,"input_tokens_details":{"cached_tokens":32},"output_tokens":7,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":57}}}` + "\n\n"

// TestAgentTranscripts: hand-written event sequences through the gateway,
// relayed byte for byte and metered by their API's rules.
func TestAgentTranscripts(t *testing.T) {
	tests := []struct {
		name, path, transcript, body string
		want                         record.Usage
		finish, native               string
		chunks                       int
	}{
		{"messages repeated counts", "/messages", messagesRepeatedCounts,
			`{"model":"m","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"hi"}]}`,
			record.Usage{InputTokens: 1210, CachedInputTokens: 1000, CacheWriteTokens: 200, CacheWrite1hTokens: 50, OutputTokens: 12, ToolCalls: 1, Source: record.SourceEngine},
			"tool_calls", "tool_use", 3},
		// An engine that ends the stream after message_delta (the
		// stop reason and final counts) without message_stop: the
		// answer is whole, and recorded as such, as chat's without
		// [DONE] is.
		{"messages without message_stop", "/messages", strings.TrimSuffix(messagesRepeatedCounts, "event: message_stop\n"+`data: {"type":"message_stop"}`+"\n\n"),
			`{"model":"m","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"hi"}]}`,
			record.Usage{InputTokens: 1210, CachedInputTokens: 1000, CacheWriteTokens: 200, CacheWrite1hTokens: 50, OutputTokens: 12, ToolCalls: 1, Source: record.SourceEngine},
			"tool_calls", "tool_use", 3},
		{"responses function call first", "/responses", responsesFunctionCall,
			`{"model":"m","input":"hi","stream":true,"user":"u-1"}`,
			record.Usage{InputTokens: 50, CachedInputTokens: 32, OutputTokens: 7, ToolCalls: 1, Source: record.SourceEngine},
			"tool_calls", "completed", 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up := newTranscriptUpstream(t, tt.transcript)
			tg := newTestGateway(t, testConfig(up.URL()))
			resp := post(t, tg.URL+"/v1"+tt.path, tt.body, nil)
			got := readAll(t, resp)
			if string(got) != tt.transcript {
				t.Errorf("client bytes differ from the upstream's:\n%s", cmp.Diff(tt.transcript, string(got)))
			}
			sent := <-up.bodies
			if string(sent) != tt.body {
				t.Errorf("upstream got %s, want the client's body unchanged", sent)
			}
			r := tg.next(t)
			if diff := cmp.Diff(tt.want, r.Usage); diff != "" {
				t.Errorf("usage (-want +got):\n%s", diff)
			}
			if r.FinishReason != tt.finish || r.NativeFinish != tt.native || r.ContentChunks != tt.chunks || r.Derived.TTFT == nil {
				t.Errorf("finish %q/%q chunks %d TTFT %v; want %q/%q %d", r.FinishReason, r.NativeFinish, r.ContentChunks, r.Derived.TTFT, tt.finish, tt.native, tt.chunks)
			}
			if r.Status != 200 || r.ErrorType != "" {
				t.Errorf("recorded %d %q, want 200 and no error", r.Status, r.ErrorType)
			}
			if r.Timeline[0].Offset != r.Marks.FirstClientToken {
				t.Errorf("timeline starts at %v, first token at %v", r.Timeline[0].Offset, r.Marks.FirstClientToken)
			}
		})
	}
}

// TestAgentErrorsAndRouting: Anthropic's paths answer the gateway's own
// errors in Anthropic's shape; keys are taken from x-api-key too; an
// upstream that does not speak an API is named in a 400.
func TestAgentErrorsAndRouting(t *testing.T) {
	up := newTranscriptUpstream(t, "")
	up.ctype, up.rawBody = "application/json", `{"id":"msg_1","type":"message","model":"m","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn","usage":{"input_tokens":3,"output_tokens":1}}`
	cfg := testConfig(up.URL())
	cfg.Auth.Keys = []config.Key{{KeySHA256: config.HashKey("sk-alice"), UserID: "alice"}}
	cfg.Upstreams[0].Models = []string{"m"}
	cfg.Upstreams = append(cfg.Upstreams, config.Upstream{Name: "tgi-box", URL: up.URL(), Engine: "tgi", Models: []string{"old"}})
	tg := newTestGateway(t, cfg)
	msg := `{"model":"%s","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`

	anthropicErr := func(t *testing.T, resp *http.Response, status int, typ, contains string) {
		t.Helper()
		b := readAll(t, resp)
		var e struct {
			Type  string `json:"type"`
			Error struct {
				Type    string `json:"type"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if resp.StatusCode != status || json.Unmarshal(b, &e) != nil || e.Type != "error" || e.Error.Type != typ || !strings.Contains(e.Error.Message, contains) {
			t.Errorf("got %d %s; want %d with Anthropic's error type %q mentioning %q", resp.StatusCode, b, status, typ, contains)
		}
	}
	t.Run("no key", func(t *testing.T) {
		anthropicErr(t, post(t, tg.URL+"/v1/messages", strings.Replace(msg, "%s", "m", 1), nil), 401, "authentication_error", "API key")
		tg.next(t)
	})
	t.Run("unknown model", func(t *testing.T) {
		anthropicErr(t, post(t, tg.URL+"/v1/messages", strings.Replace(msg, "%s", "nope", 1), map[string]string{"X-Api-Key": "sk-alice"}), 404, "not_found_error", "nope")
		tg.next(t)
	})
	t.Run("missing max_tokens", func(t *testing.T) {
		anthropicErr(t, post(t, tg.URL+"/v1/messages", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, map[string]string{"X-Api-Key": "sk-alice"}), 400, "invalid_request_error", "max_tokens")
		tg.next(t)
	})
	t.Run("background responses refused", func(t *testing.T) {
		// Served, it would be answered "queued" with no usage: tokens
		// outside the ledger and the quotas.
		resp := post(t, tg.URL+"/v1/responses", `{"model":"m","input":"hi","background":true}`, map[string]string{"Authorization": "Bearer sk-alice"})
		b := readAll(t, resp)
		if resp.StatusCode != 400 || !strings.Contains(string(b), `"param":"background"`) {
			t.Errorf("background response: %d %s, want a 400 naming background", resp.StatusCode, b)
		}
		if r := tg.next(t); r.ErrorType != record.ErrInvalidRequest || r.Status != 400 {
			t.Errorf("record: %d %q", r.Status, r.ErrorType)
		}
	})
	t.Run("upstream without the API", func(t *testing.T) {
		anthropicErr(t, post(t, tg.URL+"/v1/messages", strings.Replace(msg, "%s", "old", 1), map[string]string{"X-Api-Key": "sk-alice"}), 400, "invalid_request_error", "tgi-box (engine tgi)")
		if r := tg.next(t); r.ErrorType != record.ErrUnsupported || r.Status != 400 {
			t.Errorf("record: %d %q", r.Status, r.ErrorType)
		}
		resp := post(t, tg.URL+"/v1/responses", `{"model":"old","input":"hi"}`, map[string]string{"Authorization": "Bearer sk-alice"})
		b := readAll(t, resp)
		if resp.StatusCode != 400 || !strings.Contains(string(b), `"code":"unsupported_endpoint"`) || !strings.Contains(string(b), "tgi-box") {
			t.Errorf("responses to tgi: %d %s", resp.StatusCode, b)
		}
		tg.next(t)
	})
	t.Run("x-api-key accepted, anthropic headers forwarded, key not", func(t *testing.T) {
		resp := post(t, tg.URL+"/v1/messages", strings.Replace(msg, "%s", "m", 1),
			map[string]string{"X-Api-Key": "sk-alice", "Anthropic-Version": "2023-06-01", "Anthropic-Beta": "prompt-caching-2024-07-31"})
		readAll(t, resp)
		<-up.bodies
		h := <-up.headers
		if resp.StatusCode != 200 || h.Get("Anthropic-Version") != "2023-06-01" || h.Get("Anthropic-Beta") != "prompt-caching-2024-07-31" || h.Get("X-Api-Key") != "" {
			t.Errorf("status %d; upstream headers %v", resp.StatusCode, h)
		}
		r := tg.next(t)
		if r.UserID != "alice" || r.Usage.InputTokens != 3 || r.FinishReason != "stop" || r.NativeFinish != "end_turn" {
			t.Errorf("record: user %q usage %+v finish %q/%q", r.UserID, r.Usage, r.FinishReason, r.NativeFinish)
		}
	})
}

// TestAnthropicUpstream: an upstream of engine anthropic gets its key as
// x-api-key (never a bearer token) and a default anthropic-version; a
// client's own version is kept.
func TestAnthropicUpstream(t *testing.T) {
	up := newTranscriptUpstream(t, "")
	up.ctype, up.rawBody = "application/json", `{"id":"msg_1","type":"message","model":"claude","content":[],"stop_reason":"max_tokens","usage":{"input_tokens":3,"output_tokens":8}}`
	cfg := testConfig(up.URL())
	cfg.Upstreams[0].Engine, cfg.Upstreams[0].APIKey = "anthropic", "sk-ant-upstream"
	tg := newTestGateway(t, cfg)
	for _, version := range []string{"", "2099-01-01"} {
		hdr := map[string]string{}
		if version != "" {
			hdr["Anthropic-Version"] = version
		}
		readAll(t, post(t, tg.URL+"/v1/messages", `{"model":"claude","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`, hdr))
		<-up.bodies
		h := <-up.headers
		want := version
		if want == "" {
			want = AnthropicVersion
		}
		if h.Get("X-Api-Key") != "sk-ant-upstream" || h.Get("Authorization") != "" || h.Get("Anthropic-Version") != want {
			t.Errorf("client version %q: upstream got x-api-key %q, authorization %q, version %q", version, h.Get("X-Api-Key"), h.Get("Authorization"), h.Get("Anthropic-Version"))
		}
		if r := tg.next(t); r.FinishReason != "length" || r.NativeFinish != "max_tokens" {
			t.Errorf("finish %q/%q", r.FinishReason, r.NativeFinish)
		}
	}
	resp := post(t, tg.URL+"/v1/chat/completions", chatReq, nil)
	if b := readAll(t, resp); resp.StatusCode != 400 || !strings.Contains(string(b), "engine anthropic") {
		t.Errorf("chat to anthropic: %d %s", resp.StatusCode, b)
	}
	tg.next(t)
}

// TestCountTokens: Anthropic's token counting is passed through and
// recorded, with no tokens used; its errors are in Anthropic's shape.
func TestCountTokens(t *testing.T) {
	se := startSim(t, sim.Config{})
	tg := simGateway(t, se)
	resp := post(t, tg.URL+"/v1/messages/count_tokens", `{"model":"`+simModel+`","system":"Be brief.","messages":[{"role":"user","content":"How many tokens is this?"}]}`, nil)
	b := readAll(t, resp)
	var n struct {
		InputTokens int64 `json:"input_tokens"`
	}
	if resp.StatusCode != 200 || json.Unmarshal(b, &n) != nil || n.InputTokens == 0 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	r := tg.next(t)
	if r.Endpoint != endpointCountTokens || r.Status != 200 || r.Usage.Total() != 0 || r.Usage.Source != record.SourceNone || r.PromptBytes == 0 {
		t.Errorf("recorded %q %d usage %+v prompt %d bytes", r.Endpoint, r.Status, r.Usage, r.PromptBytes)
	}
	if r.Derived.TTFT != nil || r.Marks.FirstUpstreamToken != 0 {
		t.Errorf("counting tokens generates none, but TTFT %v, first upstream token %v", r.Derived.TTFT, r.Marks.FirstUpstreamToken)
	}
	resp = post(t, tg.URL+"/v1/messages/count_tokens", `{"model":"`+simModel+`","messages":[]}`, nil)
	if b := readAll(t, resp); resp.StatusCode != 400 || !strings.Contains(string(b), `{"type":"error","error":{"type":"invalid_request_error"`) {
		t.Errorf("empty messages: %d %s", resp.StatusCode, b)
	}
	tg.next(t)
}

// TestAgentRetryKeepsEndUser: a Messages request retried on another
// upstream after an error keeps its end user on every attempt's Record.
func TestAgentRetryKeepsEndUser(t *testing.T) {
	broken := startSim(t, sim.Config{Faults: sim.Faults{ErrorRate: 1}})
	good := startSim(t, sim.Config{})
	cfg := testConfig(good.URL)
	cfg.Upstreams = []config.Upstream{
		{Name: "broken", URL: broken.URL, Engine: "vllm", Models: []string{simModel}},
		{Name: "good", URL: good.URL, Engine: "vllm", Models: []string{simModel}},
	}
	cfg.Retry.OnStatus = []int{500}
	tg := newTestGateway(t, cfg)
	req := `{"model":"` + simModel + `","max_tokens":64,"metadata":{"user_id":"cust-r"},"messages":[{"role":"user","content":"hi"}]}`
	retried := false
	for range 2 { // one of the two starts at "broken"
		resp := post(t, tg.URL+"/v1/messages", req, nil)
		if b := readAll(t, resp); resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, b)
		}
		r := tg.next(t)
		if r.Upstream == "broken" {
			retried = true
			if r.EndUser != "cust-r" || r.Status != 500 {
				t.Errorf("failed attempt: end user %q status %d", r.EndUser, r.Status)
			}
			r = tg.next(t)
		}
		if r.EndUser != "cust-r" || r.Status != 200 || r.Usage.OutputTokens == 0 {
			t.Errorf("attempt %d on %s: end user %q status %d usage %+v", r.Attempt, r.Upstream, r.EndUser, r.Status, r.Usage)
		}
	}
	if !retried {
		t.Error("no request started at the broken upstream")
	}
}
