package gateway

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/record"
)

// TestSystemFingerprint: the system prompt alone is hashed and sized, in
// each API's place for it; the rest of the prompt changes nothing.
func TestSystemFingerprint(t *testing.T) {
	hash := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
	for _, tc := range []struct {
		name, endpoint, body, system string
	}{
		{"chat system", "chat", `{"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"hi"}]}`, "Be brief."},
		{"chat developer parts", "chat", `{"model":"m","messages":[{"role":"developer","content":[{"type":"text","text":"A"},{"type":"text","text":"B"}]},{"role":"user","content":"hi"}]}`, "A\nB"},
		{"chat none", "chat", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, ""},
		{"responses instructions", endpointResponses, `{"model":"m","instructions":"Be brief.","input":"hi"}`, "Be brief."},
		{"responses input system", endpointResponses, `{"model":"m","input":[{"role":"system","content":"S"},{"role":"user","content":"hi"}]}`, "S"},
		{"messages system string", endpointMessages, `{"model":"m","max_tokens":5,"system":"Be brief.","messages":[{"role":"user","content":"hi"}]}`, "Be brief."},
		{"messages system blocks", endpointMessages, `{"model":"m","max_tokens":5,"system":[{"type":"text","text":"A","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":"hi"}]}`, "A"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var rec record.Record
			if _, aerr := parseRequest([]byte(tc.body), tc.endpoint, &rec); aerr != nil {
				t.Fatalf("parse: %+v", aerr)
			}
			want, wantTokens := "", int64(0)
			if tc.system != "" {
				want, wantTokens = hash(tc.system), int64((len(tc.system)+3)/4)
			}
			if rec.SystemSHA256 != want || rec.SystemTokens != wantTokens {
				t.Errorf("system %q %d, want %q %d", rec.SystemSHA256, rec.SystemTokens, want, wantTokens)
			}
		})
	}
}
