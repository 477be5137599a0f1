package gateway

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/tollgate-dev/tollgate/internal/sim"
)

// TestOpenAISDKResponses drives the Responses API with the official
// OpenAI Go SDK through tollgate in front of the simulator, and the same
// calls straight to an identical simulator: the ledger's tokens equal the
// usage the SDK reported, TTFT is no later than the SDK's first delta,
// and the SDK's events are, event by event, the engine's (ids and
// timestamps aside). Retrieving, listing the input of and deleting the
// stored response go through too.
func TestOpenAISDKResponses(t *testing.T) {
	behind := startSim(t, sim.Config{Seed: 11})
	direct := startSim(t, sim.Config{Seed: 11})
	tg := simGateway(t, behind)
	db := ledger(t)
	via := openai.NewClient(option.WithBaseURL(tg.URL+"/v1"), option.WithAPIKey("sk-sdk"), option.WithMaxRetries(0))
	straight := openai.NewClient(option.WithBaseURL(direct.URL), option.WithAPIKey("sk-sdk"), option.WithMaxRetries(0))
	ctx := t.Context()
	params := responses.ResponseNewParams{
		Model:            simModel,
		Input:            responses.ResponseNewParamsInputUnion{OfString: openai.String("Name three colours.")},
		SafetyIdentifier: openai.String("cust-sdk"),
	}
	out := option.WithHeader(sim.OutputTokensHeader, "30")

	var createdID string
	t.Run("create", func(t *testing.T) {
		resp, err := via.Responses.New(ctx, params, out)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := straight.Responses.New(ctx, params, out); err != nil {
			t.Fatal(err)
		}
		r := stored(t, db, tg.next(t))
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
		ref := straight.Responses.NewStreaming(ctx, params, out)
		var want []string
		for ref.Next() {
			want = append(want, ref.Current().RawJSON())
		}
		if err := ref.Err(); err != nil {
			t.Fatal(err)
		}
		norm := func(s string) string { return agentVolatile.ReplaceAllString(s, `"$1":_`) }
		if len(events) != len(want) {
			t.Fatalf("SDK got %d events through tollgate, %d from the engine", len(events), len(want))
		}
		for i := range events {
			if norm(events[i]) != norm(want[i]) {
				t.Errorf("event %d through tollgate:\n%s\nfrom the engine:\n%s", i, events[i], want[i])
			}
		}
		if text.String() != final.OutputText() || text.Len() == 0 {
			t.Errorf("deltas add up to %q, the final response says %q", text.String(), final.OutputText())
		}
		r := stored(t, db, tg.next(t))
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
