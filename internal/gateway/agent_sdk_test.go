package gateway

import (
	"bytes"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/tollgate-dev/tollgate/internal/sim"
)

// TestOpenAISDKResponses drives the Responses API with the official
// OpenAI Go SDK through tollgate in front of the simulator, with a tap
// (upstreamTap) keeping the engine's bytes: the ledger's tokens equal the
// usage the SDK reported, TTFT is no later than the SDK's first delta
// (its answer, not streamed), the SDK's answer and events are exactly the
// engine's, and the text (or a forced function call's arguments) its
// deltas add up to is what the engine's spell.
// Retrieving, listing the input of and deleting the stored response go
// through too. (The Go SDK has no accumulator of Responses events; the
// node SDKs' are checked in TestNodeSDKs.)
func TestOpenAISDKResponses(t *testing.T) {
	se := startSim(t, sim.Config{Seed: 11})
	tap := startUpstreamTap(t, se.URL)
	cfg := testConfig(tap.URL)
	cfg.Upstreams[0].Models = []string{simModel}
	tg := newTestGateway(t, cfg)
	db := ledger(t)
	via := openai.NewClient(option.WithBaseURL(tg.URL+"/v1"), option.WithAPIKey("sk-sdk"), option.WithMaxRetries(0))
	ctx := t.Context()
	params := responses.ResponseNewParams{
		Model:            simModel,
		Input:            responses.ResponseNewParamsInputUnion{OfString: openai.String("Name three colours.")},
		SafetyIdentifier: openai.String("cust-sdk"),
	}
	out := option.WithHeader(sim.OutputTokensHeader, "30")

	var createdID string
	t.Run("create", func(t *testing.T) {
		sent := time.Now()
		resp, err := via.Responses.New(ctx, params, out)
		if err != nil {
			t.Fatal(err)
		}
		took := time.Since(sent)
		r := stored(t, db, tg.next(t))
		upstream := tap.body(t, r)
		if got := resp.RawJSON(); got != string(bytes.TrimSpace(upstream)) {
			t.Errorf("the SDK's answer:\n%s\nthe engine's:\n%s", got, upstream)
		}
		if want := responsesOutput(t, upstream).Text; resp.OutputText() != want {
			t.Errorf("the SDK's output text %q, the engine's %q", resp.OutputText(), want)
		}
		if r.Derived.TTFT == nil || *r.Derived.TTFT > took {
			t.Errorf("TTFT %v, the SDK had its answer after %v", r.Derived.TTFT, took)
		}
		u := resp.Usage
		if r.Usage.InputTokens != u.InputTokens || r.Usage.CachedInputTokens != u.InputTokensDetails.CachedTokens ||
			r.Usage.OutputTokens != u.OutputTokens || r.Usage.ReasoningTokens != u.OutputTokensDetails.ReasoningTokens || u.OutputTokens != 30 {
			t.Errorf("ledger %+v, SDK reported %+v", r.Usage, u)
		}
		if r.ResponseID != resp.ID || r.EndUser != "cust-sdk" || r.FinishReason != "stop" || resp.OutputText() == "" {
			t.Errorf("ledger id %q end user %q finish %q; SDK id %q text %q", r.ResponseID, r.EndUser, r.FinishReason, resp.ID, resp.OutputText())
		}
		createdID = resp.ID
	})

	t.Run("stream", func(t *testing.T) {
		sent := time.Now()
		stream := via.Responses.NewStreaming(ctx, params, out)
		var firstDelta time.Duration
		var events []string
		var text strings.Builder
		var final responses.Response
		for stream.Next() {
			ev := stream.Current()
			events = append(events, ev.RawJSON())
			switch ev.Type {
			case "response.output_text.delta":
				if firstDelta == 0 {
					firstDelta = time.Since(sent)
				}
				text.WriteString(ev.Delta)
			case "response.completed":
				final = ev.Response
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		r := stored(t, db, tg.next(t))
		upstream := tap.body(t, r)
		var want []string
		for _, d := range sseData(upstream) {
			want = append(want, string(d))
		}
		if len(events) != len(want) {
			t.Fatalf("SDK got %d events through tollgate, the engine sent %d", len(events), len(want))
		}
		for i := range events {
			if events[i] != want[i] {
				t.Errorf("event %d through tollgate:\n%s\nfrom the engine:\n%s", i, events[i], want[i])
			}
		}
		engineFinal, engineDeltas := responsesStreamOutput(t, upstream)
		if text.String() != strings.Join(engineDeltas, "") || final.OutputText() != engineFinal.Text || text.Len() == 0 {
			t.Errorf("the SDK's deltas add up to %q and its final response says %q; the engine's deltas %q, its final response %q",
				text.String(), final.OutputText(), engineDeltas, engineFinal.Text)
		}
		u := final.Usage
		if r.Usage.InputTokens != u.InputTokens || r.Usage.CachedInputTokens != u.InputTokensDetails.CachedTokens ||
			r.Usage.OutputTokens != u.OutputTokens || r.Usage.ReasoningTokens != u.OutputTokensDetails.ReasoningTokens || u.OutputTokens != 30 {
			t.Errorf("ledger %+v, SDK reported %+v", r.Usage, u)
		}
		if r.Derived.TTFT == nil || *r.Derived.TTFT > firstDelta {
			t.Errorf("TTFT %v, the SDK's first delta after %v", r.Derived.TTFT, firstDelta)
		}
		if r.ContentChunks != 30 {
			t.Errorf("%d output events recorded, want one per token", r.ContentChunks)
		}
	})

	t.Run("stream, tool call", func(t *testing.T) {
		tool := params
		tool.Input = responses.ResponseNewParamsInputUnion{OfString: openai.String("Weather in Paris?")}
		tool.Tools = []responses.ToolUnionParam{{OfFunction: &responses.FunctionToolParam{Name: "get_weather", Strict: openai.Bool(false),
			Parameters: map[string]any{"type": "object", "required": []string{"city"}, "properties": map[string]any{"city": map[string]any{"type": "string"}}}}}}
		tool.ToolChoice = responses.ResponseNewParamsToolChoiceUnion{OfToolChoiceMode: openai.Opt(responses.ToolChoiceOptionsRequired)}
		sent := time.Now()
		stream := via.Responses.NewStreaming(ctx, tool, out)
		var firstDelta time.Duration
		var events []string
		var args strings.Builder
		var final responses.Response
		for stream.Next() {
			ev := stream.Current()
			events = append(events, ev.RawJSON())
			switch ev.Type {
			case "response.function_call_arguments.delta":
				if firstDelta == 0 {
					firstDelta = time.Since(sent)
				}
				args.WriteString(ev.Delta)
			case "response.completed":
				final = ev.Response
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		r := stored(t, db, tg.next(t))
		upstream := tap.body(t, r)
		var want []string
		for _, d := range sseData(upstream) {
			want = append(want, string(d))
		}
		if diff := cmp.Diff(want, events); diff != "" {
			t.Errorf("the SDK's events differ from the engine's (-engine +SDK):\n%s", diff)
		}
		engineFinal, engineDeltas := responsesStreamOutput(t, upstream)
		var sdkCalls []sdkTool
		for _, o := range final.Output {
			if o.Type == "function_call" {
				sdkCalls = append(sdkCalls, sdkTool{o.Name, o.AsFunctionCall().Arguments})
			}
		}
		if len(engineDeltas) != 1 || args.String() != engineDeltas[0] || !cmp.Equal(sdkCalls, engineFinal.ToolCalls) {
			t.Errorf("the SDK's argument deltas add up to %q and its final calls are %+v; the engine's deltas %q, its final calls %+v",
				args.String(), sdkCalls, engineDeltas, engineFinal.ToolCalls)
		}
		u := final.Usage
		if r.Usage.InputTokens != u.InputTokens || r.Usage.CachedInputTokens != u.InputTokensDetails.CachedTokens ||
			r.Usage.OutputTokens != u.OutputTokens || r.Usage.ReasoningTokens != u.OutputTokensDetails.ReasoningTokens || u.OutputTokens != 30 {
			t.Errorf("ledger %+v, SDK reported %+v", r.Usage, u)
		}
		if r.Usage.ToolCalls != 1 || len(sdkCalls) != 1 || r.FinishReason != "tool_calls" {
			t.Errorf("ledger: %d tool calls, finish %q; the SDK got %d calls", r.Usage.ToolCalls, r.FinishReason, len(sdkCalls))
		}
		if r.Derived.TTFT == nil || *r.Derived.TTFT > firstDelta {
			t.Errorf("TTFT %v, the SDK's first delta after %v", r.Derived.TTFT, firstDelta)
		}
	})

	t.Run("retrieve, input items, delete", func(t *testing.T) {
		if createdID == "" {
			t.Skip("create failed")
		}
		got, err := via.Responses.Get(ctx, createdID, responses.ResponseGetParams{})
		if err != nil || got.ID != createdID {
			t.Fatalf("get: %v, id %q", err, got.ID)
		}
		if r := tg.next(t); r.Endpoint != endpointResponseItem || r.ResponseID != createdID || r.Status != 200 || r.ResponseBytes == 0 {
			t.Errorf("get recorded as %q %q %d, %d bytes", r.Endpoint, r.ResponseID, r.Status, r.ResponseBytes)
		} else if got.Usage.OutputTokens == 0 || r.Usage.InputTokens != 0 || r.Usage.OutputTokens != 0 {
			// The stored response repeats its creation's usage, which
			// the create's Record already holds: counted again here, it
			// would be billed twice.
			t.Errorf("get recorded %d+%d tokens of a response with %d output tokens; want none", r.Usage.InputTokens, r.Usage.OutputTokens, got.Usage.OutputTokens)
		}
		items, err := via.Responses.InputItems.List(ctx, createdID, responses.InputItemListParams{})
		if err != nil || len(items.Data) == 0 {
			t.Fatalf("input items: %v (%d)", err, len(items.Data))
		}
		tg.next(t)
		if err := via.Responses.Delete(ctx, createdID); err != nil {
			t.Fatal(err)
		}
		tg.next(t)
		_, err = via.Responses.Get(ctx, createdID, responses.ResponseGetParams{})
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound {
			t.Errorf("get after delete: %v, want the engine's 404", err)
		}
		if r := tg.next(t); r.Status != 404 || r.ErrorType != "upstream_error" {
			t.Errorf("get after delete recorded %d %q", r.Status, r.ErrorType)
		}
	})
}
