package clickhouse

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/store"
)

// column is one column of the requests table. The CREATE TABLE, the INSERT
// and the SELECT are all built from ledger (itself built from
// store.Fields), in its order, so they cannot drift apart (RowBinary has
// no column names to catch a swap).
type column struct {
	name string
	typ  string
	// dim marks a low-cardinality dimension: LowCardinality(String) where
	// the server has it (see Features).
	dim bool
	enc func(e *enc, r *record.Record)
	// dec reads the column back into r; nil for columns that are only
	// there to be queried (derived figures are recomputed by Finish, the
	// partition day and version are bookkeeping).
	dec func(d *dec, r *record.Record) error
}

// optStr writes s as a Nullable(String), NULL when ok is false.
func optStr(e *enc, s string, ok bool) {
	if e.null(!ok) {
		e.str(s)
	}
}

// noArrival stands for a zero Arrival, which has no Unix time. The gateway
// always sets Arrival; this keeps a Record without one exact on the round
// trip (1677-09-21 is no real arrival).
const noArrival = math.MinInt64

func arrivalNS(t time.Time) int64 {
	if t.IsZero() {
		return noArrival
	}
	return t.UnixNano()
}

// maxDay is the last day a Date holds on every server: 2105-12-31 on
// 18.16 (later days read back as 0000-00-00), 2149-06-06 on current ones.
const maxDay = 49672

// day is the partition: the UTC day of arrival, as ClickHouse's Date (days
// since 1970), clamped to what a Date holds. The clamp is monotonic, so a
// bound on day derived from a bound on arrival never drops a row; the
// exact bound is always arrival_ns. Report days in another zone come from
// the rollups, not from this column.
func day(t time.Time) uint16 {
	switch {
	case t.IsZero() || t.Unix() < 0:
		return 0
	case t.Unix()/86400 > maxDay:
		return maxDay
	}
	return uint16(t.Unix() / 86400)
}

// ledger is the requests table: the partition day, then store.Fields.
// The names follow the SQLite ledger's columns (but arrival, which is
// arrival_ns here), so a query reads the same on both.
var ledger = func() []column {
	out := []column{{"day", "Date", false, func(e *enc, r *record.Record) { e.u16(day(r.Arrival)) }, nil}}
	for _, f := range store.Fields {
		out = append(out, columnOf(f))
	}
	return out
}()

// columnOf is f's column: its ClickHouse type, and how its value is
// written and read back in RowBinary, by its kind.
func columnOf(f store.Field) column {
	c := column{name: f.Column(), dim: f.LowCardinality}
	switch f.Kind {
	case store.KindString:
		get := f.Get.(func(*record.Record) *string)
		c.typ = "String"
		c.enc = func(e *enc, r *record.Record) { e.str(*get(r)) }
		c.dec = func(d *dec, r *record.Record) error { *get(r) = d.str(); return nil }
	case store.KindInt:
		get := f.Get.(func(*record.Record) *int)
		c.typ = "Int64"
		c.enc = func(e *enc, r *record.Record) { e.i64(int64(*get(r))) }
		c.dec = func(d *dec, r *record.Record) error { *get(r) = int(d.i64()); return nil }
	case store.KindInt64:
		get := f.Get.(func(*record.Record) *int64)
		c.typ = "Int64"
		c.enc = func(e *enc, r *record.Record) { e.i64(*get(r)) }
		c.dec = func(d *dec, r *record.Record) error { *get(r) = d.i64(); return nil }
	case store.KindDuration:
		get := f.Get.(func(*record.Record) *time.Duration)
		c.typ = "Int64"
		c.enc = func(e *enc, r *record.Record) { e.i64(int64(*get(r))) }
		c.dec = func(d *dec, r *record.Record) error { *get(r) = time.Duration(d.i64()); return nil }
	case store.KindBool:
		get := f.Get.(func(*record.Record) *bool)
		c.typ = "UInt8"
		c.enc = func(e *enc, r *record.Record) { e.flag(*get(r)) }
		c.dec = func(d *dec, r *record.Record) error { *get(r) = d.flag(); return nil }
	case store.KindOptInt64:
		get := f.Get.(func(*record.Record) **int64)
		c.typ = "Nullable(Int64)"
		c.enc = func(e *enc, r *record.Record) {
			if v := *get(r); e.null(v == nil) {
				e.i64(*v)
			}
		}
		c.dec = func(d *dec, r *record.Record) error {
			if d.null() {
				v := d.i64()
				*get(r) = &v
			}
			return nil
		}
	case store.KindOptFloat64:
		get := f.Get.(func(*record.Record) **float64)
		c.typ = "Nullable(Float64)"
		c.enc = func(e *enc, r *record.Record) {
			if v := *get(r); e.null(v == nil) {
				e.f64(*v)
			}
		}
		c.dec = func(d *dec, r *record.Record) error {
			if d.null() {
				v := d.f64()
				*get(r) = &v
			}
			return nil
		}
	case store.KindTime:
		get := f.Get.(func(*record.Record) *time.Time)
		c.typ = "Int64"
		c.enc = func(e *enc, r *record.Record) { e.i64(arrivalNS(*get(r))) }
		c.dec = func(d *dec, r *record.Record) error {
			if ns := d.i64(); ns != noArrival {
				*get(r) = time.Unix(0, ns).UTC()
			}
			return nil
		}
	case store.KindJSON:
		get, isNil := f.Get.(func(*record.Record) any), f.IsNil
		c.typ = "Nullable(String)"
		c.enc = func(e *enc, r *record.Record) { s, ok := jsonOf(get(r), !isNil(r)); optStr(e, s, ok) }
		c.dec = func(d *dec, r *record.Record) error {
			if d.null() {
				if err := json.Unmarshal([]byte(d.str()), get(r)); err != nil && d.err == nil {
					return fmt.Errorf("decode %s of %q: %w", f.Name, r.RequestID, err)
				}
			}
			return nil
		}
	case store.KindDerived:
		get := f.Get.(func(*record.Record) int64)
		c.typ = "Int64"
		c.enc = func(e *enc, r *record.Record) { e.i64(get(r)) }
	case store.KindOptDerived:
		get := f.Get.(func(*record.Record) *time.Duration)
		c.typ = "Nullable(Int64)"
		c.enc = func(e *enc, r *record.Record) {
			if d := get(r); e.null(d == nil) {
				e.i64(int64(*d))
			}
		}
	default:
		panic(fmt.Sprintf("clickhouse: field %s has kind %d, which this store cannot keep", f.Name, f.Kind))
	}
	return c
}

// The sampled detail and the write version follow the ledger columns. The
// timeline lives in the same row rather than a second table, so one INSERT
// writes a request whole; ClickHouse reads only the columns a query names,
// so listing never touches it.
var (
	timelineCol = column{"timeline", "Nullable(String)", false,
		func(e *enc, r *record.Record) {
			if e.null(!r.Sampled || r.Timeline == nil) {
				e.scratch = record.AppendTimeline(e.scratch[:0], r.Timeline)
				e.bytes(e.scratch)
			}
		},
		func(d *dec, r *record.Record) error {
			if d.null() {
				tl, err := record.ParseTimeline(d.str())
				if err != nil && d.err == nil {
					return fmt.Errorf("decode timeline of %q: %w", r.RequestID, err)
				}
				r.Timeline = tl
			}
			return nil
		}}
	// verCol is ReplacingMergeTree's version. It falls as the clock rises,
	// so when two writers race on one request_id (the only way a second row
	// gets in, see Insert) the merge keeps the earlier write: the first
	// write wins, as the store contract says.
	verCol = column{"ver", "UInt64", false, nil, nil}
)

// allColumns is the table in order: the ledger, the timeline, the version.
var allColumns = append(append(ledger[:len(ledger):len(ledger)], timelineCol), verCol)

// createRequests is the CREATE TABLE of the ledger for a server with f.
//
// Partitioned by UTC day so that a time range reads only its days and old
// days drop whole; ordered by (day, request_id) because that is the
// identity ReplacingMergeTree collapses replays on, and it serves the
// lookups by id. Time-range listings read whole days, which is what
// ClickHouse is for.
func createRequests(db string, f Features) string {
	var b strings.Builder
	fmt.Fprintf(&b, "CREATE TABLE IF NOT EXISTS %s.requests (\n", quoteIdent(db))
	for i, c := range allColumns {
		typ := c.typ
		if c.dim && f.LowCardinality {
			typ = "LowCardinality(" + typ + ")"
		}
		fmt.Fprintf(&b, "\t%s %s", c.name, typ)
		if i < len(allColumns)-1 {
			b.WriteString(",")
		}
		b.WriteString("\n")
	}
	b.WriteString(") ENGINE = ReplacingMergeTree(ver)\nPARTITION BY day\nORDER BY (day, request_id)")
	return b.String()
}

// names lists cols' names, for INSERT and SELECT.
func names(cols []column) string {
	out := make([]string, len(cols))
	for i, c := range cols {
		out[i] = c.name
	}
	return strings.Join(out, ", ")
}

var (
	insertColumns = names(allColumns)
	// readColumns are the ledger columns read back, in order.
	readColumns = func() []column {
		var out []column
		for _, c := range ledger {
			if c.dec != nil {
				out = append(out, c)
			}
		}
		return out
	}()
	selectColumns = names(readColumns)
)

// encodeRow appends r (finished) as a row of allColumns written at ver.
func encodeRow(e *enc, r *record.Record, ver uint64) {
	for _, c := range ledger {
		c.enc(e, r)
	}
	timelineCol.enc(e, r)
	e.u64(ver)
}

// decodeRow reads a row of readColumns, then the timeline if withTimeline.
func decodeRow(d *dec, withTimeline bool) (*record.Record, error) {
	r := new(record.Record)
	var first error
	keep := func(err error) {
		if first == nil {
			first = err
		}
	}
	for _, c := range readColumns {
		keep(c.dec(d, r))
	}
	if withTimeline {
		keep(timelineCol.dec(d, r))
	}
	if d.err != nil {
		return nil, d.err
	}
	return r, first
}

// jsonOf is v's JSON when ok, as the SQLite ledger stores tags and engine
// timing (encoding/json sorts map keys, so equal tags are equal text).
func jsonOf(v any, ok bool) (string, bool) {
	if !ok {
		return "", false
	}
	b, err := json.Marshal(v)
	if err != nil {
		// Maps of strings and the timing struct always marshal.
		return "", false
	}
	return string(b), true
}
