package gateway

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/label"
)

// FuzzFinishPath drives the whole request path, from the client's headers
// and body to the finished Record and its metrics, with random identity
// headers, request ids, model names and engine usage. Whatever the input:
// no panic reaches a response (each gets its whole answer or an error),
// exactly one Record per request, and no label exceeds its bound.
func FuzzFinishPath(f *testing.F) {
	f.Add("搜索业务搜索业务搜索业务搜索业务搜索业务中文", "sess", "tpl", "a=1", "client-1", "m", int64(5), int64(3), int64(1), "stop", true)
	f.Add("a\xe4\xb8", "\xff", "", "k=\xe4", "bad id with spaces", strings.Repeat("模", 90), int64(-1), int64(1<<62), int64(7), "weird", false)
	f.Add("", "", strings.Repeat("t", 300), strings.Repeat("k=v,", 20), "", "", int64(0), int64(0), int64(0), "", true)
	// Malformed usage after the first chunk: the stream ends with an error.
	f.Add("0", "0", "", "0", "0", "*", int64(-1), int64(1<<62), int64(7), "weird", true)

	var (
		mu   sync.Mutex
		body string // what the upstream answers next
	)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		b := body
		mu.Unlock()
		if strings.HasPrefix(b, "data:") {
			w.Header().Set("Content-Type", "text/event-stream")
		} else {
			w.Header().Set("Content-Type", "application/json")
		}
		_, _ = io.WriteString(w, b)
	}))
	defer up.Close()
	cfg := testConfig(up.URL + "/v1")
	cfg.Upstreams[0].Models = []string{"*"}
	cfg.Metrics.MaxModels, cfg.Metrics.MaxBizLines, cfg.Metrics.MaxTemplates = 3, 3, 3
	tg := newTestGateway(f, cfg)
	client := &http.Client{Timeout: 10 * time.Second}

	f.Fuzz(func(t *testing.T, biz, session, template, tags, clientID, model string, in, out, cached int64, finish string, stream bool) {
		usage := fmt.Sprintf(`{"prompt_tokens":%d,"completion_tokens":%d,"prompt_tokens_details":{"cached_tokens":%d}}`, in, out, cached)
		fin := jsonString(finish)
		mu.Lock()
		if stream {
			body = `data: {"id":"c","object":"chat.completion.chunk","model":` + jsonString(model) + `,"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":null}]}` + "\n\n" +
				`data: {"id":"c","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{},"finish_reason":` + fin + `}],"usage":` + usage + "}\n\ndata: [DONE]\n\n"
		} else {
			body = `{"id":"c","object":"chat.completion","model":` + jsonString(model) + `,"choices":[{"index":0,"message":{"role":"assistant","content":"x"},"finish_reason":` + fin + `}],"usage":` + usage + `}`
		}
		mu.Unlock()
		req, err := http.NewRequest(http.MethodPost, tg.URL+"/v1/chat/completions",
			strings.NewReader(`{"model":`+jsonString(model)+`,"stream":`+fmt.Sprint(stream)+`,"messages":[{"role":"user","content":"hi"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		for k, v := range map[string]string{"X-Tollgate-Biz": biz, "X-Tollgate-Session": session, "X-Tollgate-Template": template,
			"X-Tollgate-Tags": tags, "X-Request-Id": clientID} {
			req.Header.Set(k, v)
		}
		resp, err := client.Do(req)
		if err != nil {
			if strings.Contains(err.Error(), "invalid header field") {
				return // the client refused to send it: nothing reached the gateway
			}
			t.Fatalf("request failed: %v", err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("response cut (status %d): %v", resp.StatusCode, err)
		}
		// The Record first: a failure below must not leave it to the next
		// input, which would then report it as an extra one.
		r := tg.next(t)
		tg.noMore(t)
		switch {
		case resp.StatusCode == 200 && stream && !strings.HasSuffix(string(b), "data: [DONE]\n\n"):
			// A stream the upstream broke after its first chunk (usage
			// with negative tokens, say) ends with an error event
			// instead, as OpenAI's do; its Record has the error's
			// status, not the 200 sent before it.
			if r.ErrorType == "" || !strings.Contains(string(b), `data: {"error":`) {
				t.Fatalf("stream without [DONE] or an error event (record error %q): %q", r.ErrorType, b)
			}
		case r.Status != resp.StatusCode:
			t.Fatalf("recorded status %d, answered %d", r.Status, resp.StatusCode)
		}
		for _, v := range []string{r.Model, r.BizLine, r.SessionID, r.TemplateID, r.ClientRequestID} {
			if len(v) > MaxIdentifier {
				t.Fatalf("an identifier of %d bytes kept", len(v))
			}
		}
		checkLabelBounds(t, tg, map[string]int{"model": 3 + 1, "biz_line": 3 + 2, "finish_reason": len(label.FinishReasons) + 2})
	})
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// checkLabelBounds fails when a metric has more distinct values of a
// label than its bound allows.
func checkLabelBounds(t *testing.T, tg *testGateway, bounds map[string]int) {
	t.Helper()
	mfs, err := tg.Reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, mf := range mfs {
		values := map[string]map[string]bool{}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if values[lp.GetName()] == nil {
					values[lp.GetName()] = map[string]bool{}
				}
				values[lp.GetName()][lp.GetValue()] = true
			}
		}
		for name, bound := range bounds {
			if n := len(values[name]); n > bound {
				t.Fatalf("%s has %d values of %s, bound %d: %v", mf.GetName(), n, name, bound, keys(values[name]))
			}
		}
	}
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
