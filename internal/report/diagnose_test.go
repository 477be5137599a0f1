package report

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/store"
)

func TestDecayRatio(t *testing.T) {
	ms := time.Millisecond
	pt := func(i int, off time.Duration) record.TimelinePoint {
		return record.TimelinePoint{Index: i, Offset: off}
	}
	steady := []record.TimelinePoint{pt(0, 10*ms), pt(10, 110*ms), pt(20, 210*ms)}
	slowing := []record.TimelinePoint{pt(0, 10*ms), pt(10, 110*ms), pt(20, 410*ms)}
	if r := decayRatio(steady); r != 1 {
		t.Errorf("steady = %v, want 1", r)
	}
	if r := decayRatio(slowing); r != 3 {
		t.Errorf("slowing = %v, want 3", r)
	}
	if decayRatio(steady[:2]) != 0 {
		t.Error("two points give a ratio")
	}
}

func TestDiagnose(t *testing.T) {
	s := seed(t, nil)
	now := t0.Add(time.Hour)
	var recs []*record.Record
	for i := range 40 {
		in := int64(300)
		ttft := 50 * time.Millisecond
		if i%4 == 0 { // long prompts: slow prefill
			in, ttft = 5000, 900*time.Millisecond
		}
		r := &record.Record{RequestID: "d" + string(rune('A'+i)), Model: "m", Upstream: "u", UpstreamStatus: 200, Status: 200, Stream: true, Sampled: i < 4,
			Arrival: t0.Add(time.Duration(i) * time.Second), Usage: record.Usage{InputTokens: in, OutputTokens: 21, Source: record.SourceEngine},
			Marks: record.Marks{UpstreamSent: time.Millisecond, FirstUpstreamToken: ttft, FirstClientToken: ttft, LastUpstreamToken: ttft + 2*time.Second, LastToken: ttft + 2*time.Second, End: ttft + 2*time.Second + time.Millisecond}}
		if i < 4 {
			r.Timeline = []record.TimelinePoint{{Index: 0, Offset: ttft}, {Index: 10, Offset: ttft + 500*time.Millisecond}, {Index: 20, Offset: ttft + 2*time.Second}}
		}
		r.Finish()
		recs = append(recs, r)
	}
	if err := s.Insert(context.Background(), store.Batch{Records: recs}); err != nil {
		t.Fatal(err)
	}
	results, err := Diagnose(context.Background(), s, t0, now, store.Filter{}, 1000)
	if err != nil {
		t.Fatal(err)
	}
	byTitle := map[string]*Result{}
	for _, r := range results {
		byTitle[strings.SplitN(r.Title, ":", 2)[0]] = r
	}
	in := byTitle["Latency by input length (tokens)"]
	if len(in.Rows) != 2 || in.Rows[0][0] != "0–512" || in.Rows[0][2] != 50.0 || in.Rows[1][0] != "2048–8192" || in.Rows[1][2] != 900.0 {
		t.Errorf("input buckets = %v", in.Rows)
	}
	tl := byTitle["Token timelines (sampled requests)"]
	if tl.Rows[1][1] != int64(4) || tl.Rows[1][2] != 1.0 {
		t.Errorf("decay row = %v, want all 4 sampled streams slower towards the end", tl.Rows[1])
	}
	var buf bytes.Buffer
	Waterfall(&buf, recs[0], time.Now())
	for _, want := range []string{"prefill", "decode", "sum", "inferred:upstream TTFT"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("waterfall lacks %q:\n%s", want, buf.String())
		}
	}
}

// TestWaterfallEnginePending: a vLLM request whose span is still expected
// says "engine timing pending" beside its inferred segments, until the
// span arrives or the join window passes.
func TestWaterfallEnginePending(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	r := &record.Record{RequestID: "r1", Model: "m", Upstream: "vllm", Engine: "vllm", Status: 200, UpstreamStatus: 200, Stream: true, Arrival: at,
		Usage: record.Usage{InputTokens: 10, OutputTokens: 5, Source: record.SourceEngine}}
	r.Marks = record.Marks{Admitted: ms(1), UpstreamSent: ms(2), UpstreamHeaders: ms(30), FirstUpstreamToken: ms(80), FirstClientToken: ms(81),
		LastToken: ms(200), LastUpstreamToken: ms(200), End: ms(201)}
	r.EngineTimingDue = r.Marks.End + 2*time.Minute
	r.Finish()
	end := at.Add(r.Marks.End)
	for _, tc := range []struct {
		name    string
		now     time.Time
		timing  *record.EngineTiming
		pending bool
	}{
		{"just finished", end.Add(10 * time.Second), nil, true},
		{"window passed", end.Add(2 * time.Minute), nil, false},
		{"span arrived", end.Add(10 * time.Second), &record.EngineTiming{Signal: "vllm-span", Queue: ms(5), Prefill: ms(40), Decode: ms(100)}, false},
	} {
		c := *r
		c.EngineTiming = tc.timing
		c.Finish()
		var buf bytes.Buffer
		Waterfall(&buf, &c, tc.now)
		out := buf.String()
		if got := strings.Contains(out, "engine timing pending"); got != tc.pending {
			t.Errorf("%s: pending shown %v, want %v:\n%s", tc.name, got, tc.pending, out)
		}
		if tc.pending && (!strings.Contains(out, "inferred:upstream TTFT (engine queue included) — engine timing pending") || !strings.Contains(out, "expected within 1m50s")) {
			t.Errorf("%s: want the inferred prefill marked and the time left:\n%s", tc.name, out)
		}
	}
}

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }
