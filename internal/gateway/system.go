package gateway

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"sync"

	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/tokenizer"
)

// The system prompt's fingerprint: a template whose system prompt grows
// from 200 to 3,000 tokens is the seeds' opening incident, so every
// Record carries the hash and token length of its system prompt alone —
// never its text (docs/metrics.md, "system_sha256").

// systemText is the system prompt of a request: chat's system and
// developer messages (and a Responses input's), Responses' instructions,
// Messages' system; text parts joined by newlines. "" when it has none.
func systemText(endpoint string, cr *clientRequest) string {
	var parts []string
	switch endpoint {
	case "chat":
		parts = roleTexts(cr.Messages)
	case endpointResponses:
		parts = append(texts(cr.Instructions), roleTexts(cr.Input)...)
	case endpointMessages, endpointCountTokens:
		parts = texts(cr.System)
	}
	return strings.Join(parts, "\n")
}

// roleTexts are the texts of the system and developer messages of a
// message list (anything else: none).
func roleTexts(raw json.RawMessage) []string {
	if len(raw) == 0 || raw[0] != '[' {
		return nil
	}
	var msgs []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	if json.Unmarshal(raw, &msgs) != nil {
		return nil
	}
	var out []string
	for _, m := range msgs {
		if m.Role == "system" || m.Role == "developer" {
			out = append(out, texts(m.Content)...)
		}
	}
	return out
}

// texts are the texts of a content: a string, or a list of parts with a
// text field (chat's content parts, Messages' text blocks, Responses'
// input_text).
func texts(raw json.RawMessage) []string {
	if len(raw) == 0 {
		return nil
	}
	var s string
	if raw[0] == '"' && json.Unmarshal(raw, &s) == nil {
		return []string{s}
	}
	var parts []struct {
		Text *string `json:"text"`
	}
	if raw[0] != '[' || json.Unmarshal(raw, &parts) != nil {
		return nil
	}
	var out []string
	for _, p := range parts {
		if p.Text != nil {
			out = append(out, *p.Text)
		}
	}
	return out
}

// setSystem fingerprints the system prompt: its hash, and its length as
// bytes / 4 until the model's tokenizer counts it (countSystem).
func setSystem(rec *record.Record, text string) {
	if text == "" {
		return
	}
	sum := sha256.Sum256([]byte(text))
	rec.SystemSHA256 = hex.EncodeToString(sum[:])
	rec.SystemTokens = int64((len(text) + 3) / 4)
}

// systemCounts remembers the token counts of system prompts by model and
// hash: a template sends the same one again and again, and counting a
// 3,000-token prompt on every request would cost the proxy path.
type systemCounts struct {
	mu sync.Mutex
	m  map[string]int64
}

// maxSystemCounts bounds the remembered counts; when full it starts over.
const maxSystemCounts = 4096

// count sets rec.SystemTokens with ct, from memory when it can.
func (c *systemCounts) count(rec *record.Record, ct *tokenizer.Counter, text string) {
	if ct == nil || text == "" {
		return
	}
	k := rec.Model + "\x00" + rec.SystemSHA256
	c.mu.Lock()
	n, ok := c.m[k]
	c.mu.Unlock()
	if !ok {
		n = int64(ct.TextTokens(text))
		c.mu.Lock()
		if c.m == nil || len(c.m) >= maxSystemCounts {
			c.m = map[string]int64{}
		}
		c.m[k] = n
		c.mu.Unlock()
	}
	rec.SystemTokens = n
}
