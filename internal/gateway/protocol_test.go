package gateway

import (
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/record"
)

// TestEndUser: which body field names the end user, in which order, and
// its bound.
func TestEndUser(t *testing.T) {
	long := strings.Repeat("é", 100) // 200 bytes
	tests := []struct {
		endpoint, body, want string
	}{
		{"chat", `{"model":"m","messages":[{"role":"user","content":"x"}],"user":"u-1"}`, "u-1"},
		{"chat", `{"model":"m","messages":[{"role":"user","content":"x"}],"user":"u-1","safety_identifier":"s-1"}`, "s-1"},
		{"responses", `{"model":"m","input":"x","metadata":{"user_id":"meta-1"}}`, "meta-1"},
		{"responses", `{"model":"m","prompt":{"id":"pmpt_1"},"user":"no-input"}`, "no-input"}, // input is optional
		{"responses", `{"model":"m","input":"x","metadata":{"user":"meta-2"}}`, "meta-2"},
		{"responses", `{"model":"m","input":"x","user":"","metadata":{"user_id":7}}`, ""},
		{"messages", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"x"}],"metadata":{"user_id":"ant-1"}}`, "ant-1"},
		{"messages", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"x"}],"metadata":{"user_id":"` + long + `"}}`, long[:128]},
		{"messages", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"x"}],"metadata":{"user_id":"` + "\xff\xfe" + `"}}`, "\uFFFD\uFFFD"}, // encoding/json replaces each bad byte
	}
	for _, tt := range tests {
		rec := &record.Record{}
		if _, e := parseRequest([]byte(tt.body), tt.endpoint, rec); e != nil {
			t.Fatalf("%s: %v", tt.body, e)
		}
		if rec.EndUser != tt.want {
			t.Errorf("%s %s: end user %q, want %q", tt.endpoint, tt.body, rec.EndUser, tt.want)
		}
	}
}

// TestAgentRequestRefusals: malformed agent requests get a 400 naming the
// field.
func TestAgentRequestRefusals(t *testing.T) {
	tests := []struct{ endpoint, body, param string }{
		{"responses", `{"model":"m","input":{"a":1}}`, "input"},
		{"messages", `{"model":"m","max_tokens":1,"messages":[]}`, "messages"},
		{"messages", `{"model":"m","messages":[{"role":"user","content":"x"}]}`, "max_tokens"},
		{"count_tokens", `{"model":"m","messages":"x"}`, "messages"},
		{"messages", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"x"}],"user":5}`, "user"},
	}
	for _, tt := range tests {
		_, e := parseRequest([]byte(tt.body), tt.endpoint, &record.Record{})
		if e == nil || e.Status != 400 || e.Param != tt.param {
			t.Errorf("%s %s: %+v, want a 400 on %q", tt.endpoint, tt.body, e, tt.param)
		}
	}
}

// TestSpeaks: which engines serve which API.
func TestSpeaks(t *testing.T) {
	for _, tt := range []struct {
		engine, endpoint string
		want             bool
	}{
		{"vllm", "responses", true}, {"vllm", "messages", true}, {"sglang", "messages", true}, {"ollama", "responses", true},
		{"openai", "responses", true}, {"openai", "messages", false}, {"anthropic", "messages", true}, {"anthropic", "count_tokens", true},
		{"anthropic", "responses", false}, {"anthropic", "chat", false}, {"tgi", "responses", false}, {"tgi", "messages", false},
		{"llamacpp", "messages", true}, {"llamacpp", "responses", true}, {"tgi", "chat", true}, {"openai", "embeddings", true},
	} {
		if got := speaks(tt.engine, tt.endpoint); got != tt.want {
			t.Errorf("speaks(%s, %s) = %v", tt.engine, tt.endpoint, got)
		}
	}
}
