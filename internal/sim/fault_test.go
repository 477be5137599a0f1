package sim

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestFaultStatus(t *testing.T) {
	tests := []struct {
		fault      string
		wantStatus int
		wantType   string
	}{
		{"error", 500, "InternalServerError"},
		{"error=503", 503, "ServiceUnavailableError"},
		{"status=429", 429, "RateLimitError"},
		{"status=400", 400, "BadRequestError"},
	}
	for _, tt := range tests {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/stream=%v", tt.fault, stream), func(t *testing.T) {
				h := start(t, fastConfig())
				var got errorBody
				h.postJSON("/v1/chat/completions", chatBody("hi", "stream", stream), tt.wantStatus, &got, FaultHeader, tt.fault)
				want := errorBody{Object: "error", Type: tt.wantType, Code: tt.wantStatus}
				if diff := cmp.Diff(want, got, ignoreMessage); diff != "" || !strings.HasPrefix(got.Message, "simulated fault") {
					t.Errorf("error body (-want +got):\n%s\nmessage %q", diff, got.Message)
				}
			})
		}
	}
}

var ignoreMessage = cmp.FilterPath(func(p cmp.Path) bool { return p.Last().String() == ".Message" }, cmp.Ignore())

func TestFaultResetStream(t *testing.T) {
	h := start(t, fastConfig())
	resp := h.post("/v1/chat/completions", chatBody("hi", "stream", true), FaultHeader, "reset-after=3", OutputTokensHeader, "10")
	defer resp.Body.Close()
	events, err := readEvents(resp.Body)
	if !isUnexpectedEOF(err) {
		t.Fatalf("read error %v, want unexpected EOF", err)
	}
	// The role chunk, then exactly three tokens, and no end.
	if len(events) != 4 || strings.Contains(strings.Join(events, ""), "[DONE]") {
		t.Errorf("events before the reset: %q", events)
	}
	if st := h.nextStats(); st.FinishReason != "abort" {
		t.Errorf("engine stats %+v, want the sequence aborted", st)
	}
}

func TestFaultResetBeyondOutput(t *testing.T) {
	h := start(t, fastConfig())
	resp := h.post("/v1/chat/completions", chatBody("hi", "stream", true), FaultHeader, "reset-after=50", OutputTokensHeader, "2")
	defer resp.Body.Close()
	events, err := readEvents(resp.Body)
	if !isUnexpectedEOF(err) || len(events) != 3 {
		t.Errorf("got %d events and %v; want role + 2 tokens, then unexpected EOF before the finish chunk", len(events), err)
	}
}

func TestFaultResetNonStreamed(t *testing.T) {
	h := start(t, fastConfig())
	req, err := http.NewRequest(http.MethodPost, h.srv.URL+"/v1/chat/completions", strings.NewReader(`{"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(FaultHeader, "reset-after=2")
	resp, err := h.srv.Client().Do(req)
	if err == nil {
		resp.Body.Close()
		t.Fatalf("got status %d, want the connection dropped before the response", resp.StatusCode)
	}
}

func TestFaultMalformed(t *testing.T) {
	h := start(t, fastConfig())
	resp := h.post("/v1/chat/completions", chatBody("hi", "stream", true), FaultHeader, "malformed-after=2", OutputTokensHeader, "4")
	defer resp.Body.Close()
	events, err := readEvents(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var broken []int
	content := 0
	for i, ev := range events {
		if ev == "[DONE]" {
			continue
		}
		var c streamChunk
		if json.Unmarshal([]byte(ev), &c) != nil {
			broken = append(broken, i)
			continue
		}
		if len(c.Choices) == 1 && c.Choices[0].Delta.Content != nil && *c.Choices[0].Delta.Content != "" {
			content++
		}
	}
	// role, token, token, broken, token, token, finish, [DONE]
	if diff := cmp.Diff([]int{3}, broken); diff != "" || events[3] != `{"id": broken` || content != 4 || events[len(events)-1] != "[DONE]" {
		t.Errorf("broken events at %v, %d content chunks; events %q", broken, content, events)
	}
}

func TestFaultMalformedNonStreamed(t *testing.T) {
	h := start(t, fastConfig())
	resp := h.post("/v1/chat/completions", chatBody("hi"), FaultHeader, "malformed-after=0")
	defer resp.Body.Close()
	if body := readAll(t, resp.Body); resp.StatusCode != http.StatusOK || body != `{"id": broken` {
		t.Errorf("got %d %q", resp.StatusCode, body)
	}
}

// TestFaultStall reads the stream on a raw connection so that a short read
// deadline can show the stall the way a client's idle timeout would.
func TestFaultStall(t *testing.T) {
	h := start(t, fastConfig())
	conn, err := net.Dial("tcp", h.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := `{"messages":[{"role":"user","content":"hi"}],"stream":true}`
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: sim\r\nContent-Type: application/json\r\n"+
		"%s: stall-after=2:1h\r\n%s: 5\r\nContent-Length: %d\r\n\r\n%s", FaultHeader, OutputTokensHeader, len(body), body)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(resp.Body)
	var events []string
	for len(events) < 3 && sc.Scan() { // the role chunk and two tokens
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			events = append(events, data)
		}
	}
	if len(events) != 3 {
		t.Fatalf("events before the stall: %q (%v)", events, sc.Err())
	}
	if err := conn.SetReadDeadline(time.Now().Add(50 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	for sc.Scan() {
		if sc.Text() != "" {
			t.Fatalf("read %q during the stall", sc.Text())
		}
	}
	var ne net.Error
	if err := sc.Err(); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read during the stall: %v; want a timeout", err)
	}
	conn.Close()
	// The client left during the stall; the engine finished generating.
	if st := h.nextStats(); st.OutputTokens != 5 {
		t.Errorf("engine stats %+v", st)
	}
}

func TestFaultShortStallCompletes(t *testing.T) {
	h := start(t, fastConfig())
	resp := h.post("/v1/chat/completions", chatBody("hi", "stream", true), FaultHeader, "stall-after=1:5ms", OutputTokensHeader, "4")
	defer resp.Body.Close()
	events, err := readEvents(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if chunks := decodeChunks(t, events); len(chunks) != 6 {
		t.Errorf("%d chunks after a short stall, want role + 4 tokens + finish", len(chunks))
	}
}

func TestFaultStallNonStreamed(t *testing.T) {
	h := start(t, fastConfig())
	client := *h.srv.Client()
	client.Timeout = 50 * time.Millisecond
	req, err := http.NewRequest(http.MethodPost, h.srv.URL+"/v1/chat/completions", strings.NewReader(`{"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(FaultHeader, "stall-after=0:1h")
	resp, err := client.Do(req)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		if resp != nil {
			resp.Body.Close()
		}
		t.Fatalf("got %v, want a client timeout", err)
	}
}

// Configured rates of 1 make every request fail the same way.
func TestConfiguredFaults(t *testing.T) {
	t.Run("error", func(t *testing.T) {
		cfg := fastConfig()
		cfg.Faults.ErrorRate = 1
		h := start(t, cfg)
		var got errorBody
		h.postJSON("/v1/chat/completions", chatBody("hi"), http.StatusInternalServerError, &got)
	})
	t.Run("reset", func(t *testing.T) {
		cfg := fastConfig()
		cfg.Faults.ResetRate = 1
		h := start(t, cfg)
		resp := h.post("/v1/chat/completions", chatBody("hi", "stream", true))
		defer resp.Body.Close()
		if _, err := readEvents(resp.Body); !isUnexpectedEOF(err) {
			t.Errorf("read error %v, want unexpected EOF", err)
		}
	})
	t.Run("malformed", func(t *testing.T) {
		cfg := fastConfig()
		cfg.Faults.MalformedRate = 1
		h := start(t, cfg)
		resp := h.post("/v1/chat/completions", chatBody("hi", "stream", true))
		defer resp.Body.Close()
		events, err := readEvents(resp.Body)
		if err != nil || !strings.Contains(strings.Join(events, "\n"), `{"id": broken`) {
			t.Errorf("events %q, %v; want a broken one", events, err)
		}
	})
	t.Run("header overrides", func(t *testing.T) {
		cfg := fastConfig()
		cfg.Faults.ErrorRate = 1
		h := start(t, cfg)
		var got chatResult
		h.postJSON("/v1/chat/completions", chatBody("hi"), http.StatusOK, &got, FaultHeader, "none")
	})
}

func TestParseFaults(t *testing.T) {
	const def = 10 * time.Second
	none := noFaults()
	none.stallFor = def
	with := func(f func(p *faultPlan)) faultPlan {
		p := none
		f(&p)
		return p
	}
	tests := []struct {
		in      string
		want    faultPlan
		wantErr string
	}{
		{"", none, ""},
		{"none", none, ""},
		{"error", with(func(p *faultPlan) { p.status = 500 }), ""},
		{"error=503", with(func(p *faultPlan) { p.status = 503 }), ""},
		{"status=429", with(func(p *faultPlan) { p.status = 429 }), ""},
		{"reset-after=3", with(func(p *faultPlan) { p.resetAt = 3 }), ""},
		{"stall-after=0", with(func(p *faultPlan) { p.stallAt = 0 }), ""},
		{"stall-after=4:2s", with(func(p *faultPlan) { p.stallAt, p.stallFor = 4, 2*time.Second }), ""},
		{"malformed-after=7", with(func(p *faultPlan) { p.malformedAt = 7 }), ""},
		{" stall-after=1:5ms , reset-after=2 ", with(func(p *faultPlan) { p.stallAt, p.stallFor, p.resetAt = 1, 5*time.Millisecond, 2 }), ""},
		{"explode", faultPlan{}, "unknown fault"},
		{"error=200", faultPlan{}, "status must be 400-599"},
		{"status=", faultPlan{}, "status must be 400-599"},
		{"reset-after=-1", faultPlan{}, "non-negative"},
		{"reset-after", faultPlan{}, "non-negative"},
		{"stall-after=1:soon", faultPlan{}, "invalid duration"},
		{"stall-after=1:-2s", faultPlan{}, "negative duration"},
	}
	for _, tt := range tests {
		got, err := parseFaults(tt.in, def)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), FaultHeader) {
				t.Errorf("parseFaults(%q) error %v, want one with %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("parseFaults(%q): %v", tt.in, err)
			continue
		}
		if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(faultPlan{})); diff != "" {
			t.Errorf("parseFaults(%q) (-want +got):\n%s", tt.in, diff)
		}
	}
}

func FuzzParseFaults(f *testing.F) {
	for _, s := range []string{"error", "stall-after=2:1s,reset-after=4", "malformed-after=0", "status=429"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := parseFaults(s, time.Second)
		if err != nil {
			return
		}
		if p.status != 0 && (p.status < 400 || p.status > 599) || p.stallFor < 0 ||
			p.resetAt < -1 || p.stallAt < -1 || p.malformedAt < -1 {
			t.Errorf("parseFaults(%q) = %+v", s, p)
		}
	})
}
