package gateway

import (
	"bytes"
	"compress/gzip"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tollgate-dev/tollgate/internal/record"
)

// The tests of issue 16: requests at the edges a client controls must
// each leave exactly one ledger row, and never a panic.

// TestChineseBizLine: 22 Chinese characters (66 bytes) in the biz-line
// header were cut at 64 bytes, mid-character; the invalid label made
// metrics panic before the Record reached the ledger, and the stream lost
// its [DONE]. Now the value is kept whole, the stream ends, the row holds
// the real value.
func TestChineseBizLine(t *testing.T) {
	up := newTranscriptUpstream(t, streamOf("你", "好"))
	tg := newTestGateway(t, testConfig(up.URL()))
	biz := strings.Repeat("搜索业务", 5) + "中文" // 22 characters, 66 bytes
	resp := post(t, tg.URL+"/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`,
		map[string]string{"X-Tollgate-Biz": biz})
	b := readAll(t, resp)
	if !bytes.HasSuffix(b, []byte("data: [DONE]\n\n")) {
		t.Fatalf("stream did not end with [DONE]:\n%s", b)
	}
	r := tg.next(t)
	if r.BizLine != biz || r.Status != 200 {
		t.Fatalf("recorded biz line %q status %d, want %q 200", r.BizLine, r.Status, biz)
	}
	if n := testutil.ToFloat64(tg.G.metrics.InFlight()); n != 0 {
		t.Fatalf("in flight = %v after the request", n)
	}
}

// TestIdentifierBounds: an identifier the ledger keeps is at most
// MaxIdentifier bytes of valid UTF-8; beyond, a 400 names the field, the
// error quotes a short prefix only, and the refused request's row keeps a
// bounded valid prefix.
func TestIdentifierBounds(t *testing.T) {
	up := newTranscriptUpstream(t, "")
	up.ctype, up.rawBody = "application/json", nonStreamBody
	tg := newTestGateway(t, testConfig(up.URL()))
	long := strings.Repeat("业", 100) // 300 bytes
	huge := strings.Repeat("x", 4<<20)
	for _, tc := range []struct {
		name, body string
		hdr        map[string]string
		param      string // in the message
		field      func(*record.Record) string
	}{
		{"biz line too long", chatReq, map[string]string{"X-Tollgate-Biz": long}, "X-Tollgate-Biz", func(r *record.Record) string { return r.BizLine }},
		{"biz line not UTF-8", chatReq, map[string]string{"X-Tollgate-Biz": "a\xe4\xb8"}, "X-Tollgate-Biz", func(r *record.Record) string { return r.BizLine }},
		{"session too long", chatReq, map[string]string{"X-Tollgate-Session": long}, "X-Tollgate-Session", func(r *record.Record) string { return r.SessionID }},
		{"template too long", chatReq, map[string]string{"X-Tollgate-Template": long}, "X-Tollgate-Template", func(r *record.Record) string { return r.TemplateID }},
		{"tag value too long", chatReq, map[string]string{"X-Tollgate-Tags": "a=" + long}, "X-Tollgate-Tags", func(r *record.Record) string { return r.Tags["a"] }},
		{"model 4 MiB", `{"model":"` + huge + `","messages":[{"role":"user","content":"hi"}]}`, nil, "model", func(r *record.Record) string { return r.Model }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := post(t, tg.URL+"/v1/chat/completions", tc.body, tc.hdr)
			b := readAll(t, resp)
			if resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("status %d, want 400: %s", resp.StatusCode, b)
			}
			if len(b) > 1024 {
				t.Fatalf("error body is %d bytes: a long value was echoed", len(b))
			}
			if e := decodeErr(t, b); !strings.Contains(e.Error.Message, tc.param) && (e.Error.Param == nil || *e.Error.Param != tc.param) {
				t.Fatalf("error does not name %s: %s", tc.param, b)
			}
			r := tg.next(t)
			if v := tc.field(r); len(v) > MaxIdentifier || !utf8.ValidString(v) {
				t.Fatalf("row keeps %d bytes (valid UTF-8: %v)", len(v), utf8.ValidString(v))
			}
			if r.Status != 400 || r.ErrorType != record.ErrInvalidRequest {
				t.Fatalf("recorded %d %q", r.Status, r.ErrorType)
			}
		})
	}
}

// TestClientRequestIDIsNotTheKey: two requests with one X-Request-Id get
// two rows with tollgate's own ids; the client's id is kept and echoed.
func TestClientRequestIDIsNotTheKey(t *testing.T) {
	up := newTranscriptUpstream(t, "")
	up.ctype, up.rawBody = "application/json", nonStreamBody
	tg := newTestGateway(t, testConfig(up.URL()))
	var ids []string
	for range 2 {
		resp := post(t, tg.URL+"/v1/chat/completions", chatReq, map[string]string{"X-Request-Id": "same-id"})
		readAll(t, resp)
		r := tg.next(t)
		h := <-up.headers
		<-up.bodies
		if r.ClientRequestID != "same-id" || resp.Header.Get("X-Request-Id") != "same-id" {
			t.Fatalf("client id kept %q, echoed %q", r.ClientRequestID, resp.Header.Get("X-Request-Id"))
		}
		if !strings.HasPrefix(r.RequestID, "req_") || resp.Header.Get(TollgateRequestIDHeader) != r.RequestID {
			t.Fatalf("request id %q, header %q", r.RequestID, resp.Header.Get(TollgateRequestIDHeader))
		}
		if h.Get("X-Request-Id") != r.RequestID {
			t.Fatalf("upstream got X-Request-Id %q, want tollgate's %q", h.Get("X-Request-Id"), r.RequestID)
		}
		ids = append(ids, r.RequestID)
	}
	if ids[0] == ids[1] {
		t.Fatalf("both requests keyed %q", ids[0])
	}
}

// TestObserverPanicKeepsRecord: a panicking observer loses nothing: the
// ledger got the Record before it, the observers after it still run, the
// client gets its whole answer, and the panic is counted.
func TestObserverPanicKeepsRecord(t *testing.T) {
	up := newTranscriptUpstream(t, streamOf("a", "b"))
	after := make(chan *record.Record, 1)
	tg := newTestGatewayWith(t, testConfig(up.URL()), func(o *Options) {
		o.Observers = []Observer{
			{Name: "bad", Observe: func(*record.Record) { panic("observer bug") }},
			{Name: "after", Observe: func(r *record.Record) { after <- r }},
		}
	})
	resp := post(t, tg.URL+"/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`, nil)
	if b := readAll(t, resp); !bytes.HasSuffix(b, []byte("data: [DONE]\n\n")) {
		t.Fatalf("stream cut: %s", b)
	}
	r := tg.next(t)
	if got := <-after; got != r {
		t.Fatal("the observer after the panicking one saw another record")
	}
	if n := testutil.ToFloat64(tg.G.metrics.PanicsOf("bad")); n != 1 {
		t.Fatalf("panics counted %v, want 1", n)
	}
}

// TestConnectionNamedHeadersNotForwarded: RFC 9110 §7.6.1 — a header the
// Connection header names is hop-by-hop and stays at this hop.
func TestConnectionNamedHeadersNotForwarded(t *testing.T) {
	up := newTranscriptUpstream(t, "")
	up.ctype, up.rawBody = "application/json", nonStreamBody
	tg := newTestGateway(t, testConfig(up.URL()))
	resp := post(t, tg.URL+"/v1/chat/completions", chatReq, map[string]string{"Connection": "keep-alive, X-Hop", "X-Hop": "secret", "X-Other": "kept"})
	readAll(t, resp)
	tg.next(t)
	<-up.bodies
	h := <-up.headers
	if h.Get("X-Hop") != "" || h.Get("X-Other") != "kept" {
		t.Fatalf("upstream got X-Hop %q, X-Other %q", h.Get("X-Hop"), h.Get("X-Other"))
	}
}

// TestRequestBodyForms: what a JSON endpoint accepts, deliberately.
func TestRequestBodyForms(t *testing.T) {
	up := newTranscriptUpstream(t, "")
	up.ctype, up.rawBody = "application/json", nonStreamBody
	tg := newTestGateway(t, testConfig(up.URL()))
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write([]byte(chatReq))
	_ = zw.Close()
	for _, tc := range []struct {
		name, body string
		hdr        map[string]string
		status     int
		upstream   string // the body the upstream must get, when forwarded
	}{
		{"json", chatReq, nil, 200, chatReq},
		{"json with charset", chatReq, map[string]string{"Content-Type": "application/json; charset=utf-8"}, 200, chatReq},
		{"no content type", chatReq, map[string]string{"Content-Type": ""}, 200, chatReq},
		{"text/plain", chatReq, map[string]string{"Content-Type": "text/plain"}, 415, ""},
		{"multipart", chatReq, map[string]string{"Content-Type": "multipart/form-data; boundary=x"}, 415, ""},
		{"form", chatReq, map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, 415, ""},
		{"gzip", gz.String(), map[string]string{"Content-Encoding": "gzip"}, 200, chatReq},
		{"bogus gzip", chatReq, map[string]string{"Content-Encoding": "gzip"}, 400, ""},
		{"brotli", chatReq, map[string]string{"Content-Encoding": "br"}, 415, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := post(t, tg.URL+"/v1/chat/completions", tc.body, tc.hdr)
			b := readAll(t, resp)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, b)
			}
			r := tg.next(t)
			if r.Status != tc.status {
				t.Fatalf("recorded status %d", r.Status)
			}
			if tc.upstream == "" {
				decodeErr(t, b)
				return
			}
			got := <-up.bodies
			h := <-up.headers
			if string(got) != tc.upstream || h.Get("Content-Encoding") != "" {
				t.Fatalf("upstream got %q with Content-Encoding %q", got, h.Get("Content-Encoding"))
			}
		})
	}
}
