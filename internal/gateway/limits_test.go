package gateway

import (
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/record"
)

// TestResponseLimit: a non-streamed upstream answer larger than
// limits.max_response_bytes is not buffered whole nor relayed; the client
// gets 502 and the ledger says why. One within the limit passes.
func TestResponseLimit(t *testing.T) {
	up := newTranscriptUpstream(t, "")
	up.ctype, up.rawBody = "application/json", nonStreamBody
	cfg := testConfig(up.URL())
	cfg.Limits.MaxResponseBytes = int64(len(nonStreamBody))
	tg := newTestGateway(t, cfg)

	resp := post(t, tg.URL+"/v1/chat/completions", chatReq, nil)
	if b := readAll(t, resp); resp.StatusCode != 200 || !strings.Contains(string(b), "Hello there") {
		t.Fatalf("answer of exactly the limit: %d %s", resp.StatusCode, b)
	}
	tg.next(t)

	up.rawBody = nonStreamBody + " " // one byte over
	resp = post(t, tg.URL+"/v1/chat/completions", chatReq, nil)
	b := readAll(t, resp)
	if resp.StatusCode != 502 || strings.Contains(string(b), "Hello there") {
		t.Fatalf("answer over the limit: %d %s; want 502 without the answer", resp.StatusCode, b)
	}
	if e := decodeErr(t, b); !strings.Contains(e.Error.Message, "limits.max_response_bytes") {
		t.Errorf("message %q does not name the limit", e.Error.Message)
	}
	if r := tg.next(t); r.Status != 502 || r.ErrorType != record.ErrMalformed {
		t.Errorf("recorded %d %q", r.Status, r.ErrorType)
	}
}
