package record

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

const msec = time.Millisecond

func seg(t *testing.T, r Record) Segments {
	t.Helper()
	r.Finish()
	s := r.Derived.Segments
	if s.Sum() != r.Marks.End {
		t.Errorf("segments sum to %v, E2E is %v: %+v", s.Sum(), r.Marks.End, s)
	}
	for _, n := range SegmentNames {
		if s.Get(n) < 0 {
			t.Errorf("segment %s negative: %v", n, s.Get(n))
		}
	}
	return s
}

func TestSegmentsWithoutEngineSignal(t *testing.T) {
	// Sent at 5ms, 2ms to connect, first token at 207ms, last at 1207ms
	// with 100ms blocked writing to the client during decode and 10ms
	// after, end at 1230ms.
	r := Record{Stream: true,
		Marks:       Marks{AuthDone: 1, Admitted: 2, UpstreamSent: 5 * msec, UpstreamHeaders: 6 * msec, FirstUpstreamToken: 207 * msec, LastUpstreamToken: 1207 * msec, End: 1230 * msec},
		ConnectWait: 2 * msec, ClientWrite: 110 * msec, ClientWriteTail: 10 * msec,
	}
	s := seg(t, r)
	want := Segments{GatewayQueue: 5 * msec, Connect: 2 * msec, Prefill: 200 * msec, Decode: 900 * msec, ClientWrite: 110 * msec, PostProcessing: 13 * msec}
	if diff := cmp.Diff(want, s, cmpIgnoreSource); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if s.Source[SegPrefill] != "inferred:upstream TTFT (engine queue included)" || s.Source[SegDecode] != "gateway" {
		t.Errorf("sources %v", s.Source)
	}
}

func TestSegmentsWithEngineSpan(t *testing.T) {
	// The engine queued 50ms and prefilled 120ms of the 200ms it took to
	// answer: 30ms were network; it decoded for 850ms of the 900ms window.
	r := Record{Stream: true,
		Marks:       Marks{UpstreamSent: 5 * msec, FirstUpstreamToken: 207 * msec, LastUpstreamToken: 1207 * msec, End: 1230 * msec},
		ConnectWait: 2 * msec, ClientWrite: 110 * msec, ClientWriteTail: 10 * msec,
		EngineTiming: &EngineTiming{Signal: "vllm-span", Queue: 50 * msec, Prefill: 120 * msec, Decode: 850 * msec},
	}
	s := seg(t, r)
	want := Segments{GatewayQueue: 5 * msec, Connect: 32 * msec, EngineQueue: 50 * msec, Prefill: 120 * msec, Decode: 850 * msec,
		ClientWrite: 110 * msec, PostProcessing: 13 * msec, Unattributed: 50 * msec}
	if diff := cmp.Diff(want, s, cmpIgnoreSource); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if s.Source[SegEngineQueue] != "engine:vllm-span" || s.Source[SegUnattributed] != "remainder" {
		t.Errorf("sources %v", s.Source)
	}
}

func TestSegmentsEngineClampedToWindow(t *testing.T) {
	// Clocks disagree: the engine claims more queue+prefill than the whole
	// wait the gateway saw. Its figures are capped, never negative elsewhere.
	r := Record{Stream: true,
		Marks:        Marks{UpstreamSent: 1 * msec, FirstUpstreamToken: 101 * msec, LastUpstreamToken: 101 * msec, End: 102 * msec},
		EngineTiming: &EngineTiming{Signal: "llamacpp-timings", Queue: 80 * msec, Prefill: 80 * msec, Decode: 5 * msec},
	}
	s := seg(t, r)
	if s.EngineQueue != 80*msec || s.Prefill != 20*msec || s.Decode != 0 {
		t.Errorf("clamped segments %+v", s)
	}
}

func TestSegmentsRefusedAndFailed(t *testing.T) {
	s := seg(t, Record{Marks: Marks{AuthDone: msec, End: 3 * msec}})
	if s.GatewayQueue != 3*msec || len(s.Source) != 1 {
		t.Errorf("refused: %+v", s)
	}
	// Timed out waiting for the first token.
	s = seg(t, Record{Marks: Marks{UpstreamSent: 2 * msec, End: 5002 * msec}, ConnectWait: msec})
	if s.Connect != msec || s.Prefill != 4999*msec {
		t.Errorf("no token: %+v", s)
	}
}

// TestSegmentsNonStreamed: issue 18's demo request — a non-streamed
// answer whose 142 ms wait was decode by the engine's own span showed as
// connect 142 ms, decode 0.03 ms. The body arrives whole: decode is the
// engine's, what the engine did not see is network, and the time after
// the body is the gateway's reading and writing.
func TestSegmentsNonStreamed(t *testing.T) {
	// Sent at 5ms, 2ms to connect, body read at 200ms, parsed by 201ms,
	// written by 203ms, end at 204ms; the engine queued 10ms, prefilled
	// 20ms and decoded 141.9ms (21.1ms of network).
	base := Record{
		Marks:       Marks{UpstreamSent: 5 * msec, FirstUpstreamToken: 200 * msec, LastUpstreamToken: 201 * msec, FirstClientToken: 203 * msec, LastToken: 203 * msec, End: 204 * msec},
		ConnectWait: 2 * msec, ClientWrite: 2 * msec, ClientWriteTail: 2 * msec,
		Usage: Usage{OutputTokens: 100},
	}
	withEngine := base
	withEngine.EngineTiming = &EngineTiming{Signal: "vllm-span", Queue: 10 * msec, Prefill: 20 * msec, Decode: 141900 * time.Microsecond}
	s := seg(t, withEngine)
	want := Segments{GatewayQueue: 5 * msec, Connect: 2*msec + 21100*time.Microsecond, EngineQueue: 10 * msec, Prefill: 20 * msec,
		Decode: 141900 * time.Microsecond, ClientWrite: 2 * msec, PostProcessing: 2 * msec}
	if diff := cmp.Diff(want, s, cmpIgnoreSource); diff != "" {
		t.Errorf("with engine timings (-want +got):\n%s", diff)
	}
	if s.Source[SegDecode] != "engine:vllm-span" {
		t.Errorf("decode source %q", s.Source[SegDecode])
	}
	withEngine.Finish()
	if tp := withEngine.Derived.TPOT; tp == nil || *tp != 141900*time.Microsecond/99 {
		t.Errorf("TPOT %v, want the engine's decode over 99 tokens", tp)
	}

	s = seg(t, base)
	want = Segments{GatewayQueue: 5 * msec, Connect: 2 * msec, Unattributed: 193 * msec, ClientWrite: 2 * msec, PostProcessing: 2 * msec}
	if diff := cmp.Diff(want, s, cmpIgnoreSource); diff != "" {
		t.Errorf("without engine timings (-want +got):\n%s", diff)
	}
	if s.Source[SegUnattributed] != UpstreamNotSplit || s.Source[SegConnect] != "gateway" {
		t.Errorf("sources %v: the upstream's wait must not be network", s.Source)
	}
	base.Finish()
	if base.Derived.TPOT != nil {
		t.Errorf("TPOT without engine timings: %v", *base.Derived.TPOT)
	}
}

var cmpIgnoreSource = cmp.FilterPath(func(p cmp.Path) bool { return p.Last().String() == ".Source" }, cmp.Ignore())
