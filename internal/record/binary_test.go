package record_test

import (
	"encoding/binary"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	. "github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/store/storetest"
)

func ptr[T any](v T) *T { return &v }

func roundTrip(t *testing.T, r *Record) *Record {
	t.Helper()
	b, err := r.AppendBinary(nil)
	if err != nil {
		t.Fatal(err)
	}
	var got Record
	if err := got.UnmarshalBinary(b); err != nil {
		t.Fatalf("UnmarshalBinary: %v", err)
	}
	return &got
}

func TestBinaryEveryField(t *testing.T) {
	r := storetest.Filled()
	got := roundTrip(t, r)
	// The instant is kept, not the zone (as in the JSON form): UTC.
	r.Arrival = r.Arrival.UTC()
	if !reflect.DeepEqual(got, r) {
		t.Fatalf("round trip changed the record:\n got  %+v\n want %+v", got, r)
	}
	// Every field matters: changing any one of them changes the bytes.
	b, _ := r.AppendBinary(nil)
	x := *r
	x.Marks.End++
	if c, _ := x.AppendBinary(nil); string(c) == string(b) {
		t.Fatal("a changed mark encodes the same")
	}
}

func TestBinaryEdgeValues(t *testing.T) {
	nan := math.NaN()
	for name, r := range map[string]*Record{
		"zero":            {},
		"empty tags":      {Tags: map[string]string{}, Timeline: []TimelinePoint{}},
		"before 1970":     {Arrival: time.Date(1969, 7, 20, 20, 17, 40, 5, time.UTC)},
		"far future":      {Arrival: time.Date(2900, 1, 1, 0, 0, 0, 999999999, time.UTC)},
		"negative":        {Attempt: -1, Marks: Marks{End: -5}, Cost: Cost{Nanos: math.MinInt64}, Usage: Usage{InputTokens: math.MaxInt64}},
		"falling offsets": {Timeline: []TimelinePoint{{5, 100}, {2, 7}, {9, math.MaxInt64}, {0, math.MinInt64}}},
		"not utf-8":       {RequestID: "\xff\xfe", Tags: map[string]string{"\x00": "\xc3"}},
		"odd floats":      {Temperature: &nan, TopP: ptr(math.Inf(-1)), MaxTokens: ptr(int64(0))},
	} {
		t.Run(name, func(t *testing.T) {
			r.Finish()
			got := roundTrip(t, r)
			// NaN is not equal to itself: compare its bits.
			if r.Temperature != nil && math.IsNaN(*r.Temperature) {
				if math.Float64bits(*got.Temperature) != math.Float64bits(*r.Temperature) {
					t.Fatalf("NaN came back as %v", *got.Temperature)
				}
				got.Temperature, r.Temperature = nil, nil
			}
			if !reflect.DeepEqual(got, r) {
				t.Fatalf("round trip changed the record:\n got  %+v\n want %+v", got, r)
			}
		})
	}
}

// TestBinaryRefusesBadInput: every truncation of a good record, and a few
// corruptions, give an error, never a panic or a partly filled Record.
func TestBinaryRefusesBadInput(t *testing.T) {
	b, _ := storetest.Filled().AppendBinary(nil)
	for i := range len(b) {
		var r Record
		if err := r.UnmarshalBinary(b[:i]); err == nil {
			t.Fatalf("a record cut at %d of %d bytes decoded", i, len(b))
		}
		if !reflect.DeepEqual(r, Record{}) {
			t.Fatalf("a failed decode at %d bytes left fields set", i)
		}
	}
	var r Record
	if err := r.UnmarshalBinary([]byte(`{"request_id":"x"}`)); !errors.Is(err, ErrNotBinary) {
		t.Fatalf("JSON: got %v, want ErrNotBinary", err)
	}
	if err := r.UnmarshalBinary(append(b[:len(b):len(b)], 0)); err == nil || !strings.Contains(err.Error(), "after the record") {
		t.Fatalf("trailing byte: got %v", err)
	}
	// A huge tag count in a tiny payload must not allocate it.
	huge := []byte{BinaryMagicV1}
	for range 22 {
		huge = append(huge, 0)
	}
	for range 28 {
		huge = append(huge, 0)
	}
	huge = binary.AppendUvarint(huge, 1<<9) // the tags flag
	huge = append(huge, 0xff, 0xff, 0xff, 0xff, 0x0f)
	if err := r.UnmarshalBinary(huge); err == nil || !strings.Contains(err.Error(), "count") {
		t.Fatalf("huge count: got %v", err)
	}
}

// TestBinaryAgreesWithJSON: the two forms read back the same Record
// (JSON keeps durations in milliseconds, exact to the nanosecond for any
// duration a request has, so the filled record's values survive both).
func TestBinaryAgreesWithJSON(t *testing.T) {
	r := storetest.Filled()
	j, err := r.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	var fromJSON Record
	if err := fromJSON.UnmarshalJSON(j); err != nil {
		t.Fatal(err)
	}
	if got := roundTrip(t, r); !reflect.DeepEqual(got, &fromJSON) {
		t.Fatalf("binary and JSON disagree:\n binary %+v\n json   %+v", got, &fromJSON)
	}
}

func FuzzRecordBinary(f *testing.F) {
	for _, r := range []*Record{{}, storetest.Filled(), {Tags: map[string]string{"a": "b"}, Timeline: []TimelinePoint{{1, 2}}}} {
		b, _ := r.AppendBinary(nil)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var r Record
		if err := r.UnmarshalBinary(b); err != nil {
			return
		}
		// What decoded re-encodes to something that decodes the same.
		again := roundTrip(t, &r)
		if r.Temperature != nil && math.IsNaN(*r.Temperature) || r.TopP != nil && math.IsNaN(*r.TopP) {
			return // NaN != NaN; TestBinaryEdgeValues checks its bits
		}
		if !reflect.DeepEqual(again, &r) {
			t.Fatalf("decode → encode → decode changed the record:\n first  %+v\n second %+v", &r, again)
		}
	})
}

// BenchmarkRecordCodec compares the queue's binary form with the JSON form
// it replaced, on a streamed request with a sampled timeline (the costly
// kind: 10 % of requests and every failure or slow one by default).
func BenchmarkRecordCodec(b *testing.B) {
	r := &Record{RequestID: "req_01a228e49a7b0123456789abcdef", LogicalRequestID: "req_01a228e49a7b0123456789abcdef", Attempt: 1,
		TraceID: "6b0c844077b34da6a3ce929d0e0e4736", SpanID: "00f067aa0ba902b7", UserID: "user-0042", KeyID: "k_3f9a2c",
		Team: "search", BizLine: "assistant", TemplateID: "tpl-7", Tags: map[string]string{"app": "web"},
		Endpoint: "chat", Model: "qwen2.5-7b-instruct", ServedModel: "qwen2.5-7b-instruct", Upstream: "vllm-a", Engine: "vllm",
		Stream: true, MaxTokens: ptr(int64(512)), Temperature: ptr(0.7), PromptSHA256: strings.Repeat("ab", 32),
		PromptBytes: 2048, Messages: 3, RequestBytes: 2300, Arrival: time.Date(2026, 11, 29, 20, 0, 0, 123456789, time.UTC),
		Marks: Marks{AuthDone: 20 * time.Microsecond, Admitted: 40 * time.Microsecond, UpstreamSent: 90 * time.Microsecond,
			UpstreamHeaders: 3 * time.Millisecond, FirstUpstreamToken: 180 * time.Millisecond, FirstClientToken: 181 * time.Millisecond,
			LastToken: 6 * time.Second, LastUpstreamToken: 6 * time.Second, End: 6*time.Second + time.Millisecond},
		Status: 200, UpstreamStatus: 200, FinishReason: "stop", ResponseBytes: 90000, ContentChunks: 300, Sampled: true,
		Usage: Usage{InputTokens: 812, CachedInputTokens: 512, OutputTokens: 300, Source: SourceEngine},
		Cost:  Cost{Nanos: 123456, Currency: "USD", PriceVersion: "2026-11"}, FirstChunkBytes: 4, ContentBytes: 1200}
	for i := 0; i < 300; i += 10 {
		r.Timeline = append(r.Timeline, TimelinePoint{i, 181*time.Millisecond + time.Duration(i)*19*time.Millisecond})
	}
	r.Finish()
	bin, _ := r.AppendBinary(nil)
	js, _ := r.MarshalJSON()
	b.Run("binary/encode", func(b *testing.B) {
		buf := make([]byte, 0, 1024)
		b.ReportAllocs()
		for b.Loop() {
			buf, _ = r.AppendBinary(buf[:0])
		}
		b.ReportMetric(float64(len(bin)), "bytes")
	})
	b.Run("binary/decode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var x Record
			if err := x.UnmarshalBinary(bin); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json/encode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := r.MarshalJSON(); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(len(js)), "bytes")
	})
	b.Run("json/decode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var x Record
			if err := x.UnmarshalJSON(js); err != nil {
				b.Fatal(err)
			}
		}
	})
}
