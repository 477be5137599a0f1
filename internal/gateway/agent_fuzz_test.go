package gateway

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/record"
)

// FuzzAgentTap feeds arbitrary upstream streams to the Responses and
// Messages taps through the whole gateway. Whatever the engine sends: no
// panic, exactly one Record, usage within its invariants and identifiers
// within their bounds, and a stream that ended well reached the client
// byte for byte — but for blank lines outside any event, which carry
// nothing in SSE and which the event reader, as chat's, does not relay
// (events). Inputs are capped at 64 KiB so one run's work is
// bounded; the upstream closes after writing, so nothing waits on a
// timer.
func FuzzAgentTap(f *testing.F) {
	f.Add(messagesRepeatedCounts, true)
	f.Add(responsesFunctionCall, false)
	f.Add(strings.ReplaceAll(messagesRepeatedCounts, "message_stop", "message_st"), true)
	f.Add(responsesFunctionCall[:len(responsesFunctionCall)/2], false)
	f.Add("event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":-5}}\n\n", true)
	f.Add("data: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":1,\"output_tokens\":9223372036854775807}}}\n\n", false)

	var (
		mu   sync.Mutex
		body string
	)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		b := body
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, b)
	}))
	defer up.Close()
	tg := newTestGateway(f, testConfig(up.URL+"/v1"))
	client := &http.Client{Timeout: 10 * time.Second}

	f.Fuzz(func(t *testing.T, stream string, messages bool) {
		if len(stream) > 64<<10 {
			return
		}
		// A Record left by an earlier failed run would be taken for this
		// one's, and enough of them would fill the sink: drop them.
		for len(tg.Records) > 0 {
			<-tg.Records
		}
		mu.Lock()
		body = stream
		mu.Unlock()
		path, req := "/v1/responses", `{"model":"m","input":"hi","stream":true}`
		if messages {
			path, req = "/v1/messages", `{"model":"m","max_tokens":9,"stream":true,"messages":[{"role":"user","content":"hi"}]}`
		}
		resp, err := client.Post(tg.URL+path, "application/json", strings.NewReader(req))
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("response cut: %v", err)
		}
		r := tg.next(t)
		tg.noMore(t)
		if r.OK() && !strings.HasPrefix(events(stream), events(string(got))) {
			t.Fatalf("a stream recorded as whole reached the client changed:\n%q\nupstream:\n%q", got, stream)
		}
		if r.OK() && r.Usage.Source == record.SourceNone && r.ContentChunks > 0 {
			t.Fatalf("output events but no usage: %+v", r.Usage)
		}
		u := r.Usage
		if u.CachedInputTokens+u.CacheWriteTokens > u.InputTokens || u.CacheWrite1hTokens > u.CacheWriteTokens ||
			u.ReasoningTokens > u.OutputTokens || u.InputTokens < 0 || u.OutputTokens < 0 {
			t.Fatalf("usage breaks its invariants: %+v", u)
		}
		for _, v := range []string{r.ServedModel, r.ResponseID, r.FinishReason, r.NativeFinish} {
			if len(v) > MaxIdentifier {
				t.Fatalf("an identifier of %d bytes kept", len(v))
			}
		}
	})
}

// events is an SSE text without the blank lines that end no event
// (leading ones, runs of more than one), line ends made \n.
func events(s string) string {
	var b strings.Builder
	blank := true // at the start, a blank line ends nothing
	for _, l := range strings.SplitAfter(strings.ReplaceAll(s, "\r\n", "\n"), "\n") {
		if l == "\n" {
			if blank {
				continue
			}
			blank = true
		} else {
			blank = false
		}
		b.WriteString(l)
	}
	return b.String()
}
