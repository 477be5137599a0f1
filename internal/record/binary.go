package record

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"
)

// The binary form is what the write-ahead queue holds (cmd/tollgate's
// ledger): every field of a Record, exact (nanosecond durations, float
// bits), about a tenth of the JSON form's CPU to write and read. It is
// internal: the JSON form stays the interface other tools read. A queue
// written by an older tollgate holds JSON, which starts with '{'; the
// binary form starts with BinaryMagic, so a reader tells them apart by
// the first byte.
//
// Layout (v2), after the magic byte. Integers are varints (zigzag for
// signed, as encoding/binary writes them), strings a uvarint length then
// the bytes, floats their IEEE 754 bits little-endian. First the fields
// listed by strs, ints and int64s below, in that order, each list led by
// its length (a uvarint): a field added later is appended to its list,
// and a reader of an older entry leaves the fields the entry lacks at
// zero, so adding a field needs no new version. A list longer than the
// reader knows is an entry from a newer tollgate: refused. Then a uvarint of flags (the bin*
// bits); then, each when its flag is set: MaxTokens (int), Temperature
// and TopP (float), Arrival (Unix seconds int, nanoseconds uvarint), Tags
// (count, then key and value strings), Timeline (count, then per point
// the index and the offset as deltas from the previous point's: small
// numbers, so short varints), EngineTiming (Signal, then the 9 ints of
// fields).
//
// v1 (magic BinaryMagicV1) is the same without the three lengths: 22
// strings, 7 ints and 21 int64s, the lists as they were then.
//
// Derived figures are not stored: decoding calls Finish, as the JSON
// reader does, so a queued Record and a live one agree by construction.

// BinaryMagic is the first byte of the binary form (v2).
const BinaryMagic byte = 0xB2

// BinaryMagicV1 is the first byte of the first binary form, still read.
const BinaryMagicV1 byte = 0xB1

// The lengths of the field lists in v1.
const v1Strs, v1Ints, v1Int64s = 22, 7, 21

const (
	binStream = 1 << iota
	binIncludeUsage
	binClientDisconnect
	binSampled
	binCacheHit
	binMaxTokens
	binTemperature
	binTopP
	binArrival
	binTags
	binTimeline
	binEngineTiming
	binKnown = 1<<iota - 1
)

// strs lists the string fields in the binary form's order. The encoder
// and the decoder share it, so they cannot drift apart.
func (r *Record) strs() [28]*string {
	return [...]*string{&r.RequestID, &r.LogicalRequestID, &r.TraceID, &r.SpanID, &r.UserID, &r.KeyID, &r.Team,
		&r.BizLine, &r.SessionID, &r.TemplateID, &r.Endpoint, &r.Model, &r.ServedModel,
		&r.Upstream, &r.Engine, &r.PromptSHA256, &r.ErrorType, &r.ErrorMessage,
		&r.FinishReason, (*string)(&r.Usage.Source), &r.Cost.Currency, &r.Cost.PriceVersion,
		// v2
		&r.ClientRequestID, &r.ParentSpanID, &r.ResponseID,
		// added after v2 appeared, at the end
		&r.EndUser, &r.NativeFinish, &r.SystemSHA256}
}

// int64s lists the integer fields held as int64 (or a Duration); ints the
// int ones. Shared by encoder and decoder, as strs.
func (r *Record) int64s() [25]*int64 {
	m := &r.Marks
	return [...]*int64{&r.PromptBytes, &r.RequestBytes, &r.ResponseBytes, &r.ContentBytes,
		&r.Usage.InputTokens, &r.Usage.CachedInputTokens, &r.Usage.OutputTokens, &r.Usage.ReasoningTokens,
		&r.Cost.Nanos, (*int64)(&r.ConnectWait), (*int64)(&r.ClientWrite), (*int64)(&r.ClientWriteTail),
		(*int64)(&m.AuthDone), (*int64)(&m.Admitted), (*int64)(&m.UpstreamSent), (*int64)(&m.UpstreamHeaders),
		(*int64)(&m.FirstUpstreamToken), (*int64)(&m.FirstClientToken), (*int64)(&m.LastToken),
		(*int64)(&m.LastUpstreamToken), (*int64)(&m.End),
		// Added after v2 appeared, at the end.
		(*int64)(&r.EngineTimingDue), &r.Usage.CacheWriteTokens, &r.Usage.CacheWrite1hTokens, &r.SystemTokens}
}

func (r *Record) ints() [8]*int {
	return [...]*int{&r.Attempt, &r.Messages, &r.Status, &r.UpstreamStatus, &r.ContentChunks, &r.Retries, &r.FirstChunkBytes,
		// added in v2, at the end
		&r.Usage.ToolCalls}
}

func (e *EngineTiming) fields() [9]*int64 {
	return [...]*int64{(*int64)(&e.Queue), (*int64)(&e.TTFT), (*int64)(&e.Prefill), (*int64)(&e.Decode),
		(*int64)(&e.Inference), (*int64)(&e.E2E), &e.PromptTokens, &e.CompletionTokens, &e.CachedTokens}
}

// AppendBinary appends r's binary form to b (encoding.BinaryAppender).
// It never fails; the error is the interface's.
func (r *Record) AppendBinary(b []byte) ([]byte, error) {
	b = append(b, BinaryMagic)
	strs, ints, int64s := r.strs(), r.ints(), r.int64s()
	b = binary.AppendUvarint(b, uint64(len(strs)))
	for _, p := range strs {
		b = appendStr(b, *p)
	}
	b = binary.AppendUvarint(b, uint64(len(ints)))
	for _, p := range ints {
		b = binary.AppendVarint(b, int64(*p))
	}
	b = binary.AppendUvarint(b, uint64(len(int64s)))
	for _, p := range int64s {
		b = binary.AppendVarint(b, *p)
	}
	var flags uint64
	set := func(bit uint64, on bool) {
		if on {
			flags |= bit
		}
	}
	set(binStream, r.Stream)
	set(binIncludeUsage, r.IncludeUsage)
	set(binClientDisconnect, r.ClientDisconnect)
	set(binSampled, r.Sampled)
	set(binCacheHit, r.CacheHit)
	set(binMaxTokens, r.MaxTokens != nil)
	set(binTemperature, r.Temperature != nil)
	set(binTopP, r.TopP != nil)
	set(binArrival, !r.Arrival.IsZero())
	set(binTags, r.Tags != nil)
	set(binTimeline, r.Timeline != nil)
	set(binEngineTiming, r.EngineTiming != nil)
	b = binary.AppendUvarint(b, flags)
	if r.MaxTokens != nil {
		b = binary.AppendVarint(b, *r.MaxTokens)
	}
	if r.Temperature != nil {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(*r.Temperature))
	}
	if r.TopP != nil {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(*r.TopP))
	}
	if !r.Arrival.IsZero() {
		b = binary.AppendVarint(b, r.Arrival.Unix())
		b = binary.AppendUvarint(b, uint64(r.Arrival.Nanosecond()))
	}
	if r.Tags != nil {
		b = binary.AppendUvarint(b, uint64(len(r.Tags)))
		for k, v := range r.Tags {
			b = appendStr(appendStr(b, k), v)
		}
	}
	if r.Timeline != nil {
		b = binary.AppendUvarint(b, uint64(len(r.Timeline)))
		var prev TimelinePoint
		for _, p := range r.Timeline {
			b = binary.AppendVarint(b, int64(p.Index-prev.Index))
			b = binary.AppendVarint(b, int64(p.Offset-prev.Offset))
			prev = p
		}
	}
	if e := r.EngineTiming; e != nil {
		b = appendStr(b, e.Signal)
		for _, p := range e.fields() {
			b = binary.AppendVarint(b, *p)
		}
	}
	return b, nil
}

func appendStr(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// ErrNotBinary is returned by UnmarshalBinary for data that does not start
// with BinaryMagic (JSON from an older queue, say).
var ErrNotBinary = errors.New("record: not the binary form")

// UnmarshalBinary reads what AppendBinary wrote (v2, or v1 from an older
// queue), then calls Finish. Bad data gives an error naming where it
// broke, never a panic; r is left unchanged then.
func (r *Record) UnmarshalBinary(data []byte) error {
	if len(data) == 0 || (data[0] != BinaryMagic && data[0] != BinaryMagicV1) {
		return ErrNotBinary
	}
	// One string holds the payload; the Record's strings are slices of it:
	// one allocation for all of them and the tags, not one each.
	d := binDec{s: string(data[1:])}
	v1 := data[0] == BinaryMagicV1
	var x Record
	strs, ints, int64s := x.strs(), x.ints(), x.int64s()
	for _, p := range strs[:d.listLen(v1, v1Strs, len(strs), "strings")] {
		*p = d.str()
	}
	for _, p := range ints[:d.listLen(v1, v1Ints, len(ints), "ints")] {
		v := d.varint()
		if int64(int(v)) != v {
			d.fail("an int out of range")
		}
		*p = int(v)
	}
	for _, p := range int64s[:d.listLen(v1, v1Int64s, len(int64s), "int64s")] {
		*p = d.varint()
	}
	flags := d.uvarint()
	if flags&^binKnown != 0 {
		d.fail(fmt.Sprintf("unknown flags %#x", flags&^binKnown))
	}
	x.Stream = flags&binStream != 0
	x.IncludeUsage = flags&binIncludeUsage != 0
	x.ClientDisconnect = flags&binClientDisconnect != 0
	x.Sampled = flags&binSampled != 0
	x.CacheHit = flags&binCacheHit != 0
	if flags&binMaxTokens != 0 {
		v := d.varint()
		x.MaxTokens = &v
	}
	if flags&binTemperature != 0 {
		v := d.float()
		x.Temperature = &v
	}
	if flags&binTopP != 0 {
		v := d.float()
		x.TopP = &v
	}
	if flags&binArrival != 0 {
		sec, nsec := d.varint(), d.uvarint()
		if nsec >= 1e9 {
			d.fail("arrival nanoseconds out of range")
		}
		x.Arrival = time.Unix(sec, int64(nsec)).UTC()
	}
	if flags&binTags != 0 {
		n := d.count(2) // a tag takes at least two bytes
		x.Tags = make(map[string]string, n)
		for range n {
			k := d.str()
			x.Tags[k] = d.str()
		}
	}
	if flags&binTimeline != 0 {
		n := d.count(2)
		x.Timeline = make([]TimelinePoint, n)
		var prev TimelinePoint
		for i := range x.Timeline {
			p := TimelinePoint{Index: prev.Index + int(d.varint()), Offset: prev.Offset + time.Duration(d.varint())}
			x.Timeline[i], prev = p, p
		}
	}
	if flags&binEngineTiming != 0 {
		e := &EngineTiming{Signal: d.str()}
		for _, p := range e.fields() {
			*p = d.varint()
		}
		x.EngineTiming = e
	}
	if d.err == nil && d.i != len(d.s) {
		d.fail(fmt.Sprintf("%d bytes after the record", len(d.s)-d.i))
	}
	if d.err != nil {
		return d.err
	}
	x.Finish()
	*r = x
	return nil
}

// binDec reads the binary form; the first error sticks and later reads
// return zero values, so a record is decoded straight through and checked
// once.
type binDec struct {
	s   string
	i   int
	err error
}

func (d *binDec) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("record: bad binary form at byte %d: %s", d.i+1, what)
	}
	d.i = len(d.s)
}

func (d *binDec) uvarint() uint64 {
	var v uint64
	for shift := uint(0); d.i < len(d.s); shift += 7 {
		c := d.s[d.i]
		d.i++
		if shift == 63 && c > 1 {
			d.fail("a varint overflows 64 bits")
			return 0
		}
		v |= uint64(c&0x7f) << shift
		if c < 0x80 {
			return v
		}
	}
	d.fail("truncated")
	return 0
}

func (d *binDec) varint() int64 {
	u := d.uvarint()
	return int64(u>>1) ^ -int64(u&1)
}

func (d *binDec) str() string {
	n := d.uvarint()
	if n > uint64(len(d.s)-d.i) {
		d.fail("a string longer than what is left")
		return ""
	}
	s := d.s[d.i : d.i+int(n)]
	d.i += int(n)
	return s
}

func (d *binDec) float() float64 {
	if len(d.s)-d.i < 8 {
		d.fail("truncated")
		return 0
	}
	v := uint64(0)
	for k := 7; k >= 0; k-- {
		v = v<<8 | uint64(d.s[d.i+k])
	}
	d.i += 8
	return math.Float64frombits(v)
}

// listLen reads the length of a field list (v1: the fixed one), refused
// when it is longer than this reader knows: an entry from a newer
// tollgate, whose extra fields would be dropped silently.
func (d *binDec) listLen(v1 bool, v1n, known int, what string) int {
	if v1 {
		return v1n
	}
	n := d.uvarint()
	if n > uint64(known) {
		d.fail(fmt.Sprintf("%d %s, this tollgate knows %d (written by a newer version)", n, what, known))
		return 0
	}
	return int(n)
}

// count reads an element count, refused when the bytes left could not
// hold that many elements of at least min bytes: corrupt data must not
// make the reader allocate gigabytes.
func (d *binDec) count(min int) int {
	n := d.uvarint()
	if n > uint64((len(d.s)-d.i)/min) {
		d.fail("a count larger than what is left")
		return 0
	}
	return int(n)
}
