package record

import "time"

// Segment names, as in JSON and metrics labels.
const (
	SegConnect        = "connect"
	SegGatewayQueue   = "gateway_queue"
	SegEngineQueue    = "engine_queue"
	SegPrefill        = "prefill"
	SegDecode         = "decode"
	SegPostProcessing = "post_processing"
	SegClientWrite    = "client_write"
	SegUnattributed   = "unattributed"
)

// SegmentNames lists the segments in time order.
var SegmentNames = []string{SegGatewayQueue, SegConnect, SegEngineQueue, SegPrefill, SegDecode, SegClientWrite, SegPostProcessing, SegUnattributed}

// Get returns a segment by name.
func (s Segments) Get(name string) time.Duration {
	switch name {
	case SegConnect:
		return s.Connect
	case SegGatewayQueue:
		return s.GatewayQueue
	case SegEngineQueue:
		return s.EngineQueue
	case SegPrefill:
		return s.Prefill
	case SegDecode:
		return s.Decode
	case SegPostProcessing:
		return s.PostProcessing
	case SegClientWrite:
		return s.ClientWrite
	case SegUnattributed:
		return s.Unattributed
	}
	return 0
}

// UpstreamNotSplit is the source of the unattributed segment of a
// non-streamed answer without engine timings: the wait for the body is
// the engine's queue, prefill and decode together, which nothing splits.
const UpstreamNotSplit = "inferred:upstream (engine queue + prefill + decode, not split: non-streamed, no engine timings)"

// segments splits E2E along the request's own timeline, which the gateway
// walks in order:
//
//	[0, upstream_sent)                  gateway_queue: auth, body, admission
//	[upstream_sent, first_upstream)     connect, then engine queue + prefill
//	[first_upstream, last_upstream)     decode, interleaved with client writes
//	[last_upstream, end)                post-processing and the last writes
//
// A non-streamed answer arrives whole: its generation is inside the
// second window (decode from the engine's timings, or the window left
// unattributed when there are none, never network), and what follows the
// body is post-processing and the client write.
//
// Each window is split by what is known about it; engine signals replace
// inferences inside their window but can never exceed it, so the segments
// are all ≥ 0 and sum to E2E exactly, the rest being unattributed.
func (r *Record) segments() Segments {
	m := r.Marks
	e2e := m.End
	s := Segments{Source: map[string]string{}}
	set := func(name string, d *time.Duration, v time.Duration, src string) {
		if v <= 0 {
			return
		}
		*d = v
		s.Source[name] = src
	}
	if m.UpstreamSent == 0 || e2e <= 0 {
		// Refused or answered by the gateway itself.
		set(SegGatewayQueue, &s.GatewayQueue, e2e, "gateway")
		return s
	}
	set(SegGatewayQueue, &s.GatewayQueue, min(m.UpstreamSent, e2e), "gateway")

	firstUp, lastUp := m.FirstUpstreamToken, m.LastUpstreamToken
	if firstUp == 0 {
		// No token came back: the wait after sending is the upstream's.
		end := e2e
		connect := min(r.ConnectWait, end-m.UpstreamSent)
		set(SegConnect, &s.Connect, connect, "gateway")
		set(SegPrefill, &s.Prefill, end-m.UpstreamSent-connect, "inferred:no token (upstream wait, engine queue included)")
		s.Unattributed = e2e - s.Sum()
		return s
	}
	if lastUp < firstUp {
		lastUp = firstUp
	}
	lastUp = min(lastUp, e2e)

	// Window 2: connect, then the engine's queue and prefill — and, for a
	// non-streamed answer, its decode too: the whole answer is generated
	// before the body arrives.
	w2 := max(firstUp-m.UpstreamSent, 0)
	connect := min(r.ConnectWait, w2)
	set(SegConnect, &s.Connect, connect, "gateway")
	rest := w2 - connect
	eng := r.EngineTiming
	whole := !r.Stream
	if eng != nil && (eng.Queue > 0 || eng.Prefill > 0 || eng.TTFT > 0 || whole && eng.Decode > 0) {
		src := "engine:" + eng.Signal
		q := min(eng.Queue, rest)
		pf := eng.Prefill
		if pf == 0 && eng.TTFT > eng.Queue {
			pf = eng.TTFT - eng.Queue
		}
		pf = min(pf, rest-q)
		set(SegEngineQueue, &s.EngineQueue, q, src)
		set(SegPrefill, &s.Prefill, pf, src)
		used := q + pf
		if whole {
			dec := min(eng.Decode, rest-used)
			set(SegDecode, &s.Decode, dec, src)
			used += dec
		}
		// What the engine did not see of the wait is the network's (and
		// the engine's HTTP layer's): it joins connect.
		if n := rest - used; n > 0 {
			s.Connect += n
			if whole {
				s.Source[SegConnect] = "gateway+inferred:network (upstream wait − engine queue − prefill − decode)"
			} else {
				s.Source[SegConnect] = "gateway+inferred:network (upstream TTFT − engine queue − prefill)"
			}
		}
	} else if whole {
		// Queue, prefill and decode all happened before the body came, and
		// nothing says how they split: the engine's, not the network's.
		s.Source[SegUnattributed] = UpstreamNotSplit
	} else {
		set(SegPrefill, &s.Prefill, rest, "inferred:upstream TTFT (engine queue included)")
	}

	if whole {
		// A non-streamed answer has no token timeline: after the body
		// came, reading and parsing it, then writing it to the client.
		cw := min(r.ClientWrite, e2e-firstUp)
		set(SegClientWrite, &s.ClientWrite, cw, "gateway")
		set(SegPostProcessing, &s.PostProcessing, e2e-firstUp-cw, "gateway")
		s.Unattributed = max(e2e-s.Sum(), 0)
		if s.Unattributed > 0 && s.Source[SegUnattributed] == "" {
			s.Source[SegUnattributed] = "remainder"
		}
		return s
	}

	// Window 3: decode, less the time spent blocked on the client.
	w3 := lastUp - firstUp
	cwTail := min(r.ClientWriteTail, e2e-lastUp)
	cwDuring := min(max(r.ClientWrite-cwTail, 0), w3)
	dec := w3 - cwDuring
	if eng != nil && eng.Decode > 0 {
		set(SegDecode, &s.Decode, min(eng.Decode, dec), "engine:"+eng.Signal)
	} else {
		set(SegDecode, &s.Decode, dec, "gateway")
	}

	// Window 4: after the last token.
	cw := cwDuring + cwTail
	set(SegClientWrite, &s.ClientWrite, cw, "gateway")
	set(SegPostProcessing, &s.PostProcessing, e2e-lastUp-cwTail, "gateway")

	s.Unattributed = max(e2e-s.Sum(), 0)
	if s.Unattributed > 0 {
		s.Source[SegUnattributed] = "remainder"
	}
	return s
}
