package storetest

import (
	"fmt"
	"reflect"
	"time"

	"github.com/tollgate-dev/tollgate/internal/record"
)

// Base is the arrival of Record(0). It is not in UTC and carries odd
// nanoseconds on purpose: a backend must keep the instant to the nanosecond
// whatever the zone.
var Base = time.Date(2025, 3, 14, 15, 9, 26, 535897932, time.FixedZone("UTC+8", 8*3600))

// Record returns a finished Record with every field set, distinct for each
// i, arriving i seconds after Base. Durations have odd nanoseconds so that
// a backend rounding to micro- or milliseconds fails the round trip.
func Record(i int) *record.Record {
	ns := func(ms int) time.Duration { return time.Duration(ms)*time.Millisecond + time.Duration(i%997+1) }
	maxTokens := int64(256 + i)
	temp, topP := 0.7, 0.95-float64(i%10)/100
	r := &record.Record{
		RequestID:        fmt.Sprintf("req-%06d", i),
		LogicalRequestID: fmt.Sprintf("req-%06d", i),
		ClientRequestID:  fmt.Sprintf("client-%d", i%3),
		Attempt:          1,
		TraceID:          fmt.Sprintf("%032x", i+1),
		SpanID:           fmt.Sprintf("%016x", i+7),
		ParentSpanID:     fmt.Sprintf("%016x", i+11),
		UserID:           fmt.Sprintf("user-%d", i%7),
		KeyID:            fmt.Sprintf("key-%d", i%5),
		Team:             "team-a",
		BizLine:          fmt.Sprintf("biz-%d", i%3),
		SessionID:        fmt.Sprintf("sess-%d", i/4),
		TemplateID:       fmt.Sprintf("tpl-%d", i%4),
		Tags:             map[string]string{"app": "search", "feature": fmt.Sprintf("f%d", i%2), "ünïcode": "✓"},
		Endpoint:         "chat",
		EndUser:          fmt.Sprintf("customer-%d", i%4),
		Model:            fmt.Sprintf("model-%d", i%2),
		ServedModel:      fmt.Sprintf("model-%d-2025-01-01", i%2),
		Upstream:         "vllm-a",
		Engine:           "vllm",

		Stream:       true,
		IncludeUsage: i%2 == 0,
		MaxTokens:    &maxTokens,
		Temperature:  &temp,
		TopP:         &topP,
		PromptSHA256: fmt.Sprintf("%064x", i*31+5),
		PromptBytes:  int64(1000 + i),
		SystemSHA256: fmt.Sprintf("%064x", i%3+11),
		SystemTokens: int64(200 + i%3),
		Messages:     3 + i%5,
		RequestBytes: int64(1200 + i),

		Arrival: Base.Add(time.Duration(i) * time.Second),
		Marks: record.Marks{
			AuthDone:           ns(1),
			Admitted:           ns(2),
			UpstreamSent:       ns(3),
			UpstreamHeaders:    ns(40),
			FirstUpstreamToken: ns(120),
			FirstClientToken:   ns(121),
			LastToken:          ns(900 + i%100),
			End:                ns(901 + i%100),
		},
		Timeline: []record.TimelinePoint{
			{Index: 0, Offset: ns(121)},
			{Index: 10, Offset: ns(300)},
			{Index: 47, Offset: ns(900 + i%100)},
		},

		Status:           200,
		UpstreamStatus:   200,
		FinishReason:     "stop",
		NativeFinish:     "end_turn",
		ResponseID:       fmt.Sprintf("chatcmpl-%06d", i),
		ResponseBytes:    int64(9000 + i),
		ContentChunks:    48,
		ClientDisconnect: false,
		Retries:          0,
		Sampled:          true,

		Usage: record.Usage{
			InputTokens:        int64(500 + i),
			CachedInputTokens:  int64(128),
			CacheWriteTokens:   int64(64 + i%7),
			CacheWrite1hTokens: int64(i % 5),
			OutputTokens:       int64(60 + i%40),
			ReasoningTokens:    int64(i % 13),
			ToolCalls:          i % 3,
			Source:             record.SourceEngine,
		},
		FirstChunkBytes: 17,
		ContentBytes:    int64(240 + i),
		EngineTimingDue: ns(901+i%100) + 2*time.Minute,
	}
	if i%3 == 2 {
		// A failed, cancelled attempt: the ledger keeps those too.
		r.Status = record.StatusClientClosed
		r.UpstreamStatus = 0
		r.ErrorType = record.ErrClientDisconnect
		r.ErrorMessage = "client went away after 12 chunks"
		r.FinishReason = ""
		r.ClientDisconnect = true
		r.Retries = 1
		r.Usage.Source = record.SourceTokenizer
	}
	r.Finish()
	return r
}

// Records returns Record(from) … Record(from+n-1).
func Records(from, n int) []*record.Record {
	recs := make([]*record.Record, n)
	for i := range recs {
		recs[i] = Record(from + i)
	}
	return recs
}

// Minimal returns a finished Record with almost nothing set: optional
// fields absent (nil pointers, nil tags, zero marks), as for a request
// refused before it reached an upstream.
func Minimal(id string, arrival time.Time) *record.Record {
	r := &record.Record{
		RequestID: id,
		Arrival:   arrival,
		Status:    401,
		ErrorType: record.ErrAuth,
	}
	r.Finish()
	return r
}

// Unsampled returns r's ledger-only form: what Requests returns for it, and
// what Request returns when r was not sampled.
func Unsampled(r *record.Record) *record.Record {
	c := *r
	c.Timeline = nil
	return &c
}

// Filled returns a finished Record whose every field (Derived aside, which
// Finish computes) holds a value distinct from every other field's. It
// guards the future: a field added to Record that a backend forgets to
// store, or two columns swapped, fail the round trip.
func Filled() *record.Record {
	r := new(record.Record)
	n := 0
	fill(reflect.ValueOf(r).Elem(), &n)
	r.Finish()
	return r
}

var (
	timeType    = reflect.TypeFor[time.Time]()
	derivedType = reflect.TypeFor[record.Derived]()
)

func fill(v reflect.Value, n *int) {
	*n++
	switch {
	case v.Type() == timeType:
		v.Set(reflect.ValueOf(Base.Add(time.Duration(*n) * time.Hour)))
		return
	case v.Type() == derivedType:
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(fmt.Sprintf("value-%d", *n))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(*n)*1_000_003 + 7) // odd nanoseconds when a Duration
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(*n) * 1_000_003)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(float64(*n) + 0.125)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem(), n)
	case reflect.Struct:
		for i := range v.NumField() {
			fill(v.Field(i), n)
		}
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 2, 2))
		fill(v.Index(0), n)
		fill(v.Index(1), n)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(k, n)
		fill(e, n)
		m.SetMapIndex(k, e)
		v.Set(m)
	default:
		panic(fmt.Sprintf("storetest: cannot fill a %s; teach fill about it", v.Type()))
	}
}
