// Package window keeps sliding-window statistics of finished requests:
// per minute and per series (model × biz_line × upstream × template), the
// counts and token sums, and mergeable quantile sketches (DDSketch, 1 %
// relative error) of the latency segments. Any window — the last 1 m, 5 m
// or 1 h, or the same hour on each of the last 14 days — is the merge of its
// minutes. Closed minutes are persisted in the store, so windows and
// baselines survive restarts and cover weeks.
//
// It sits beside the ledger, after the gateway: the gateway hands each
// finished Record to Observe, which never blocks; the alert evaluator
// (internal/alert) reads windows.
//
// Every read of a period reaching past memory is one Query answered by a
// Reader (query.go): it plans which stored resolution serves each stretch
// — compacted local days (Compactor), whole UTC hours, minutes at the
// edges, the aggregator's memory for the newest minutes — merges their
// sketches, and keeps merged closed periods (cache.go). The dashboard's
// percentiles and overview (internal/web), the alert baselines' stored
// hours (Aggregator.Hour, fleet.Windows) and the day compactor all ask it.
package window

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/DataDog/sketches-go/ddsketch"
	"github.com/DataDog/sketches-go/ddsketch/mapping"
	sketchstore "github.com/DataDog/sketches-go/ddsketch/store"

	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/store"
)

// RelativeAccuracy is the sketches' guarantee: a quantile read from a
// window is within 1 % of the true value of the sample at that rank.
const RelativeAccuracy = 0.01

// Quantity is a per-request figure whose distribution is sketched.
type Quantity int

// The sketched quantities, in seconds (latencies) or tokens.
const (
	TTFT Quantity = iota
	TPOT
	E2E
	GatewayQueue
	EngineQueue
	Prefill
	Decode
	InputTokens
	OutputTokens
	numQuantities
)

// Windows merge only the sketch a reader asks for: merging sketches is
// most of the cost of reading a window.
const (
	NoQuantity  Quantity = -1            // counts only
	AllQuantity Quantity = numQuantities // every sketch
)

// QuantityNames name the quantities in rules and the API.
var QuantityNames = [numQuantities]string{"ttft", "tpot", "e2e", "gateway_queue", "engine_queue", "prefill", "decode", "input_tokens", "output_tokens"}

// ParseQuantity is the quantity of a name.
func ParseQuantity(name string) (Quantity, bool) {
	i := slices.Index(QuantityNames[:], name)
	return Quantity(i), i >= 0
}

func (q Quantity) String() string { return QuantityNames[q] }

// Key is one series.
type Key struct {
	Model, BizLine, Upstream, Template string
}

// Label is a dimension of Key, as rules name it.
func (k Key) Label(name string) string {
	switch name {
	case "model":
		return k.Model
	case "biz_line":
		return k.BizLine
	case "upstream":
		return k.Upstream
	case "template":
		return k.Template
	}
	return ""
}

// Labels are the dimensions a window can be grouped and filtered by.
var Labels = []string{"model", "biz_line", "upstream", "template"}

// Stats are the sums of a set of requests: a minute of one series, or a
// whole window once merged.
type Stats struct {
	Requests     int64
	Errors       int64
	FinishLength int64
	UsageMissing int64 // the engine reported no usage
	Input        int64
	Cached       int64
	Output       int64
	MaxInput     int64            // the largest single request's input tokens
	CostNanos    map[string]int64 // by currency
	sketches     [numQuantities]*ddsketch.DDSketch
}

var indexMapping = func() mapping.IndexMapping {
	m, err := mapping.NewLogarithmicMapping(RelativeAccuracy)
	if err != nil {
		panic(err) // a constant accuracy: cannot fail
	}
	return m
}()

func newSketch() *ddsketch.DDSketch {
	return ddsketch.NewDDSketch(indexMapping, sketchstore.NewBufferedPaginatedStore(), sketchstore.NewBufferedPaginatedStore())
}

// Add adds one finished request. Counts follow the rollups' definitions
// (store.TotalsOf), so an alert and a report never disagree on what an
// error or a missing usage is.
func (s *Stats) Add(r *record.Record) {
	t := store.TotalsOf(r)
	s.Requests += t.Requests
	s.Errors += t.Errors
	s.FinishLength += t.FinishLength
	s.UsageMissing += t.UsageMissing
	s.Input += t.Input
	s.Cached += t.Cached
	s.Output += t.Output
	s.MaxInput = max(s.MaxInput, r.Usage.InputTokens)
	if r.Cost.Currency != "" {
		if s.CostNanos == nil {
			s.CostNanos = map[string]int64{}
		}
		s.CostNanos[r.Cost.Currency] += r.Cost.Nanos
	}
	d := &r.Derived
	// TTFT and TPOT as the Prometheus histograms take them: successful
	// streamed requests (a non-streamed answer's "first token" is all of it).
	if r.Stream && r.OK() {
		if d.TTFT != nil {
			s.observe(TTFT, d.TTFT.Seconds())
		}
		if d.TPOT != nil {
			s.observe(TPOT, d.TPOT.Seconds())
		}
	}
	if d.E2E > 0 {
		s.observe(E2E, d.E2E.Seconds())
	}
	seg := d.Segments
	if r.Upstream != "" { // requests refused before any upstream had no queue
		s.observe(GatewayQueue, seg.Get(record.SegGatewayQueue).Seconds())
		// The engine's queue is known when the engine reported its
		// timing: a zero then counts, or P95 would be of queued requests only.
		if v := seg.Get(record.SegEngineQueue); v > 0 || r.EngineTiming != nil {
			s.observe(EngineQueue, v.Seconds())
		}
	}
	if v := seg.Get(record.SegPrefill); v > 0 {
		s.observe(Prefill, v.Seconds())
	}
	if v := seg.Get(record.SegDecode); v > 0 {
		s.observe(Decode, v.Seconds())
	}
	if r.Usage.InputTokens > 0 {
		s.observe(InputTokens, float64(r.Usage.InputTokens))
	}
	if r.Usage.OutputTokens > 0 {
		s.observe(OutputTokens, float64(r.Usage.OutputTokens))
	}
}

// maxValue bounds what a sketch holds (seconds or tokens), and so the
// bin indexes a stored sketch may carry.
const maxValue = 1e9

var minIndex, maxIndex = indexMapping.Index(indexMapping.MinIndexableValue()), indexMapping.Index(maxValue)

func (s *Stats) observe(q Quantity, v float64) {
	if s.sketches[q] == nil {
		s.sketches[q] = newSketch()
	}
	// Zero is a valid value (no queue); negatives cannot occur but must
	// not fail the sketch.
	_ = s.sketches[q].Add(min(max(v, 0), maxValue))
}

// Merge adds o into s.
func (s *Stats) Merge(o *Stats) { s.merge(o, AllQuantity) }

// merge adds o's counts into s, and its sketch of q (or all, or none).
func (s *Stats) merge(o *Stats, want Quantity) {
	s.Requests += o.Requests
	s.Errors += o.Errors
	s.FinishLength += o.FinishLength
	s.UsageMissing += o.UsageMissing
	s.Input += o.Input
	s.Cached += o.Cached
	s.Output += o.Output
	s.MaxInput = max(s.MaxInput, o.MaxInput)
	for c, n := range o.CostNanos {
		if s.CostNanos == nil {
			s.CostNanos = map[string]int64{}
		}
		s.CostNanos[c] += n
	}
	for q, sk := range o.sketches {
		if sk == nil || (want != AllQuantity && Quantity(q) != want) {
			continue
		}
		if s.sketches[q] == nil {
			s.sketches[q] = sk.Copy()
			continue
		}
		_ = s.sketches[q].MergeWith(sk) // same mapping everywhere: cannot fail
	}
}

// Quantile is the value at quantile p (0–1) of q, and how many values it
// is over; NaN when there are none.
func (s *Stats) Quantile(q Quantity, p float64) (float64, int64) {
	sk := s.sketches[q]
	if sk == nil || sk.IsEmpty() {
		return math.NaN(), 0
	}
	v, err := sk.GetValueAtQuantile(p)
	if err != nil {
		return math.NaN(), 0
	}
	return v, int64(math.Round(sk.GetCount()))
}

// encoding: a version byte, the counters as varints, the costs, then each
// sketch present as (quantity, length, DDSketch encoding).
const encVersion = 1

// MarshalBinary encodes s for the store.
func (s *Stats) MarshalBinary() ([]byte, error) {
	b := []byte{encVersion}
	for _, v := range []int64{s.Requests, s.Errors, s.FinishLength, s.UsageMissing, s.Input, s.Cached, s.Output, s.MaxInput} {
		b = binary.AppendVarint(b, v)
	}
	b = binary.AppendUvarint(b, uint64(len(s.CostNanos)))
	for _, c := range slices.Sorted(maps.Keys(s.CostNanos)) {
		b = binary.AppendUvarint(b, uint64(len(c)))
		b = append(b, c...)
		b = binary.AppendVarint(b, s.CostNanos[c])
	}
	for q, sk := range s.sketches {
		if sk == nil {
			continue
		}
		enc := encodeSketch(nil, sk)
		b = append(b, byte(q))
		b = binary.AppendUvarint(b, uint64(len(enc)))
		b = append(b, enc...)
	}
	return b, nil
}

// A sketch is stored as its zero count, then its bins as (index, count):
// a format of our own, so that decoding can bound what it builds (the
// library's decoder sizes its pages from the indexes it reads, and a few
// bad bytes could ask for gigabytes).
func encodeSketch(b []byte, sk *ddsketch.DDSketch) []byte {
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(sk.GetZeroCount()))
	n := 0
	sk.GetPositiveValueStore().ForEach(func(int, float64) bool { n++; return false })
	b = binary.AppendUvarint(b, uint64(n))
	sk.GetPositiveValueStore().ForEach(func(i int, c float64) bool {
		b = binary.AppendVarint(b, int64(i))
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(c))
		return false
	})
	return b
}

// scanSketch checks an encoded sketch and, when bin is not nil, hands it
// each positive bin; it answers the count at zero.
func scanSketch(b []byte, bin func(i int, c float64)) (float64, error) {
	count := func(b []byte) (float64, bool) {
		c := math.Float64frombits(binary.LittleEndian.Uint64(b))
		return c, c >= 0 && !math.IsInf(c, 0) && !math.IsNaN(c)
	}
	if len(b) < 8 {
		return 0, errCorrupt
	}
	zero, ok := count(b)
	if !ok {
		return 0, errCorrupt
	}
	r := bytes.NewReader(b[8:])
	n, err := binary.ReadUvarint(r)
	if err != nil || n > uint64(r.Len()/9) { // a bin takes at least 9 bytes
		return 0, errCorrupt
	}
	var buf [8]byte
	for range n {
		i, err := binary.ReadVarint(r)
		if err != nil || i < int64(minIndex) || i > int64(maxIndex) {
			return 0, errCorrupt
		}
		if _, err := io.ReadFull(r, buf[:]); err != nil {
			return 0, errCorrupt
		}
		c, ok := count(buf[:])
		if !ok || c == 0 {
			return 0, errCorrupt
		}
		if bin != nil {
			bin(int(i), c)
		}
	}
	if r.Len() != 0 {
		return 0, errCorrupt
	}
	return zero, nil
}

func decodeSketch(b []byte) (*ddsketch.DDSketch, error) {
	pos := sketchstore.NewBufferedPaginatedStore()
	zero, err := scanSketch(b, pos.AddWithCount)
	if err != nil {
		return nil, err
	}
	sk := ddsketch.NewDDSketch(indexMapping, pos, sketchstore.NewBufferedPaginatedStore())
	if zero > 0 {
		_ = sk.AddWithCount(0, zero)
	}
	return sk, nil
}

var errCorrupt = errors.New("window: corrupt stats encoding")

// parse reads an encoding's sums into s (which it resets) and hands each
// sketch's encoding, unchecked, to sketch.
func (s *Stats) parse(data []byte, sketch func(q Quantity, enc []byte) error) error {
	*s = Stats{}
	r := bytes.NewReader(data)
	v, err := r.ReadByte()
	if err != nil || v != encVersion {
		return fmt.Errorf("%w: version %d", errCorrupt, v)
	}
	for _, p := range []*int64{&s.Requests, &s.Errors, &s.FinishLength, &s.UsageMissing, &s.Input, &s.Cached, &s.Output, &s.MaxInput} {
		if *p, err = binary.ReadVarint(r); err != nil {
			return errCorrupt
		}
	}
	n, err := binary.ReadUvarint(r)
	if err != nil || n > 64 {
		return errCorrupt
	}
	for range n {
		l, err := binary.ReadUvarint(r)
		if err != nil || l > 16 || int(l) > r.Len() {
			return errCorrupt
		}
		c := make([]byte, l)
		_, _ = r.Read(c)
		nanos, err := binary.ReadVarint(r)
		if err != nil {
			return errCorrupt
		}
		if s.CostNanos == nil {
			s.CostNanos = map[string]int64{}
		}
		s.CostNanos[string(c)] = nanos
	}
	var seen [numQuantities]bool
	for r.Len() > 0 {
		q, _ := r.ReadByte()
		l, err := binary.ReadUvarint(r)
		if err != nil || q >= byte(numQuantities) || int(l) > r.Len() || seen[q] {
			return errCorrupt
		}
		seen[q] = true
		at := len(data) - r.Len()
		if err := sketch(Quantity(q), data[at:at+int(l)]); err != nil {
			return fmt.Errorf("%w: sketch %d", errCorrupt, q)
		}
		_, _ = r.Seek(int64(l), io.SeekCurrent)
	}
	return nil
}

// UnmarshalBinary decodes what MarshalBinary encoded.
func (s *Stats) UnmarshalBinary(data []byte) error {
	var sk [numQuantities]*ddsketch.DDSketch
	err := s.parse(data, func(q Quantity, enc []byte) (err error) {
		sk[q], err = decodeSketch(enc)
		return err
	})
	if err != nil {
		*s = Stats{}
		return err
	}
	s.sketches = sk
	return nil
}

// MergeBinary adds what MarshalBinary encoded to s, decoding the sketches
// of qs only (every one when none is given) and straight into s's: what
// a reader merging thousands of stored rows into a few groups needs,
// without a sketch allocated per row. A corrupt encoding changes nothing.
func (s *Stats) MergeBinary(data []byte, qs ...Quantity) error {
	want := func(q Quantity) bool { return len(qs) == 0 || slices.Contains(qs, q) }
	var sums Stats
	var encs [numQuantities][]byte
	err := sums.parse(data, func(q Quantity, enc []byte) error {
		if !want(q) {
			return nil
		}
		if _, err := scanSketch(enc, nil); err != nil {
			return err
		}
		encs[q] = enc
		return nil
	})
	if err != nil {
		return err
	}
	s.merge(&sums, AllQuantity)
	for q, enc := range encs {
		if enc == nil {
			continue
		}
		if s.sketches[q] == nil {
			s.sketches[q] = newSketch()
		}
		zero, _ := scanSketch(enc, s.sketches[q].GetPositiveValueStore().AddWithCount)
		if zero > 0 {
			_ = s.sketches[q].AddWithCount(0, zero)
		}
	}
	return nil
}

// GroupKey names a group of series by the values of some labels, as
// "model=m1,biz_line=b".
func GroupKey(k Key, by []string) string {
	var b strings.Builder
	for i, l := range by {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(l)
		b.WriteByte('=')
		b.WriteString(k.Label(l))
	}
	return b.String()
}

// Minute truncates t to its UTC minute.
func Minute(t time.Time) time.Time { return t.UTC().Truncate(time.Minute) }
