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
	r := Record{
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
	r := Record{
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
	r := Record{
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

var cmpIgnoreSource = cmp.FilterPath(func(p cmp.Path) bool { return p.Last().String() == ".Source" }, cmp.Ignore())
