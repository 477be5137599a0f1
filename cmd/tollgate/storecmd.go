package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/store"
)

// "tollgate store" moves a ledger between stores: from the embedded SQLite
// file to ClickHouse when a single replica becomes a fleet (docs/operations.md,
// "Moving from SQLite to ClickHouse").
//
//   - copy reads one store and writes the other directly: the one command
//     to run when both are reachable from one machine. Besides the ledger it
//     copies what the dashboard and alerts read that the ledger cannot give
//     back: events and the alerting windows (see copyAnalytics).
//   - export and import carry the ledger as JSON lines (the stable form of
//     "requests --json", with each sampled request's token timeline), for
//     when they are not, or to keep an archive.
//
// All three stream: a page of rows at a time, whatever the size of the
// ledger. All are idempotent: a store keeps the first row of a request_id
// and skips the rest, so a copy or import run again, or resumed after a
// failure, adds nothing twice.

const (
	defaultStoreBatch = 1000
	// maxImportLine bounds one JSON line; a record is a few KiB.
	maxImportLine = 16 << 20
	// progressEvery is how often progress is written to stderr.
	progressEvery = 2 * time.Second
)

const storeUsage = `store export [--db PATH | --config FILE] > ledger.jsonl
       tollgate store import [--db PATH | --config FILE] [--batch N] < ledger.jsonl
       tollgate store copy --from PATH [--db PATH | --config FILE] [--batch N] [--no-analytics]`

func runStore(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintf(stderr, "Usage: tollgate %s\n", storeUsage)
		return errUsage
	}
	switch args[0] {
	case "export":
		return runStoreExport(ctx, args[1:], stdout, stderr)
	case "import":
		return runStoreImport(ctx, args[1:], stdin, stderr)
	case "copy":
		return runStoreCopy(ctx, args[1:], stderr)
	default:
		fmt.Fprintf(stderr, "tollgate store: unknown subcommand %q\nUsage: tollgate %s\n", args[0], storeUsage)
		return errUsage
	}
}

func runStoreExport(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("store export", "store export [--db PATH | --config FILE] > ledger.jsonl", stderr)
	lf := addLedgerFlags(fs, "SQLite ledger `path` to export")
	batch := fs.Int("batch", defaultStoreBatch, "rows read per query")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *batch < 1 || fs.NArg() > 0 {
		fs.Usage()
		return errUsage
	}
	src, err := lf.open(ctx, nil, false)
	if err != nil {
		return err
	}
	defer src.Close()
	bw := bufio.NewWriterSize(stdout, 256<<10)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	p := newProgress(stderr, "exported", total(ctx, src))
	err = eachPage(ctx, src, *batch, func(recs []*record.Record) error {
		for _, r := range recs {
			if err := enc.Encode(r); err != nil {
				return err
			}
		}
		p.add(len(recs))
		return nil
	})
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("export: %w", err)
	}
	p.done()
	return nil
}

func runStoreImport(ctx context.Context, args []string, stdin io.Reader, stderr io.Writer) error {
	fs := newFlagSet("store import", "store import [--db PATH | --config FILE] [--batch N] < ledger.jsonl", stderr)
	lf := addLedgerFlags(fs, "SQLite ledger `path` to import into (created if missing)")
	batch := fs.Int("batch", defaultStoreBatch, "rows written per insert")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *batch < 1 || fs.NArg() > 0 {
		fs.Usage()
		return errUsage
	}
	dst, err := lf.open(ctx, nil, true)
	if err != nil {
		return err
	}
	defer dst.Close()
	n, err := importJSONL(ctx, dst, stdin, *batch, newProgress(stderr, "imported", 0))
	if err != nil {
		return fmt.Errorf("import (%d rows written before): %w", n, err)
	}
	return nil
}

func runStoreCopy(ctx context.Context, args []string, stderr io.Writer) error {
	fs := newFlagSet("store copy", "store copy --from PATH [--db PATH | --config FILE] [--batch N] [--no-analytics | --analytics-since D]", stderr)
	from := fs.String("from", "", "the SQLite ledger `path` to copy from (required)")
	lf := addLedgerFlags(fs, "SQLite ledger `path` to copy into (created if missing)")
	batch := fs.Int("batch", defaultStoreBatch, "rows read per query and written per insert")
	noAnalytics := fs.Bool("no-analytics", false, "copy the ledger only, not the events, alerting windows and engine samples")
	since := fs.Duration("analytics-since", 3*366*24*time.Hour, "copy events, alerting windows and engine samples of this last `duration`")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *from == "" || *batch < 1 || fs.NArg() > 0 {
		fs.Usage()
		return errUsage
	}
	if lf.config == "" && !lf.set("db") {
		fmt.Fprintln(stderr, "tollgate store copy: say where to: --config FILE (its store section) or --db PATH")
		return errUsage
	}
	src, err := openSQLite(ctx, *from, time.UTC, false, "check --from")
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := lf.open(ctx, nil, true)
	if err != nil {
		return err
	}
	defer dst.Close()
	n, err := copyLedger(ctx, src, dst, *batch, newProgress(stderr, "copied", total(ctx, src)))
	if err != nil {
		return fmt.Errorf("copy (%d rows read before): %w", n, err)
	}
	if *noAnalytics {
		return nil
	}
	now := time.Now().UTC()
	c, err := copyAnalytics(ctx, src, dst, now.Add(-*since).Truncate(copySpan), now.Add(copySpan))
	if err != nil {
		return fmt.Errorf("copy events and alerting windows: %w", err)
	}
	fmt.Fprintf(stderr, "copied %d events, %d window minutes, %d window hours, %d window days, %d engine samples (already there: skipped)\n",
		c.events, c.minutes, c.hours, c.days, c.samples)
	return nil
}

// copyLedger inserts every ledger row of src into dst, a page at a time.
func copyLedger(ctx context.Context, src, dst store.Store, batch int, p *progress) (int, error) {
	n := 0
	err := eachPage(ctx, src, batch, func(recs []*record.Record) error {
		if err := dst.Insert(ctx, store.Batch{Records: recs}); err != nil {
			return err
		}
		n += len(recs)
		p.add(len(recs))
		return nil
	})
	if err == nil {
		p.done()
	}
	return n, err
}

// eachPage calls fn with every ledger row of src, newest first, about page
// rows at a time, each sampled row with its token timeline.
//
// Pages follow the order every store lists in (arrival, newest first) and
// each next page starts strictly before the oldest arrival of the last; so
// that rows sharing that arrival are not cut in two, all of them join the
// page they start in (a page is then longer than asked).
func eachPage(ctx context.Context, src store.Store, page int, fn func([]*record.Record) error) error {
	var until time.Time // zero: no bound yet
	for {
		recs, err := src.Requests(ctx, store.Filter{Until: until, Limit: page})
		if err != nil {
			return err
		}
		if len(recs) == 0 {
			return nil
		}
		last := len(recs) < page
		if !last {
			oldest := recs[len(recs)-1].Arrival
			if oldest.IsZero() || (!until.IsZero() && !oldest.Before(until)) {
				return fmt.Errorf("request %q: arrival %v out of order; cannot page past it", recs[len(recs)-1].RequestID, oldest)
			}
			i := len(recs)
			for i > 0 && recs[i-1].Arrival.Equal(oldest) {
				i--
			}
			ties, err := src.Requests(ctx, store.Filter{Since: oldest, Until: oldest.Add(time.Nanosecond), Limit: math.MaxInt32})
			if err != nil {
				return err
			}
			recs = append(recs[:i], ties...)
			until = oldest
		}
		for _, r := range recs {
			if r.Sampled {
				if err := fillTimeline(ctx, src, r); err != nil {
					return err
				}
			}
		}
		if err := fn(recs); err != nil {
			return err
		}
		if last {
			return nil
		}
	}
}

// fillTimeline sets r's token timeline from its detail (Requests lists the
// ledger only).
func fillTimeline(ctx context.Context, src store.Store, r *record.Record) error {
	atts, err := src.Request(ctx, r.RequestID)
	if err != nil {
		return fmt.Errorf("detail of %q: %w", r.RequestID, err)
	}
	for _, a := range atts {
		if a.RequestID == r.RequestID {
			r.Timeline = a.Timeline
			return nil
		}
	}
	return nil
}

// importJSONL inserts the records of r, one JSON object per line, batch at
// a time; it returns how many rows it handed to the store. A line that is
// not a record stops the import with an error naming it; the batches before
// it are written (and writing them again is harmless).
func importJSONL(ctx context.Context, dst store.Store, r io.Reader, batch int, p *progress) (int, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxImportLine)
	var (
		recs    []*record.Record
		written int
		line    int
	)
	flush := func() error {
		if len(recs) == 0 {
			return nil
		}
		if err := dst.Insert(ctx, store.Batch{Records: recs}); err != nil {
			return fmt.Errorf("lines %d–%d: %w", line-len(recs)+1, line, err)
		}
		written += len(recs)
		p.add(len(recs))
		recs = recs[:0]
		return nil
	}
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		rec, err := parseRecordLine(b)
		if err != nil {
			return written, fmt.Errorf("line %d: %w", line, err)
		}
		recs = append(recs, rec)
		if len(recs) >= batch {
			if err := flush(); err != nil {
				return written, err
			}
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return written, fmt.Errorf("line %d: longer than %d MiB", line+1, maxImportLine>>20)
		}
		return written, fmt.Errorf("line %d: %w", line+1, err)
	}
	if err := flush(); err != nil {
		return written, err
	}
	p.done()
	return written, nil
}

// parseRecordLine reads one exported record, refusing what could not be one.
func parseRecordLine(b []byte) (*record.Record, error) {
	if b[0] != '{' {
		return nil, errors.New("not a JSON object (want one exported record per line)")
	}
	var r record.Record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("not a record: %w", err)
	}
	switch {
	case r.RequestID == "":
		return nil, errors.New("no request_id")
	case r.Arrival.IsZero():
		return nil, errors.New("no timing.arrival")
	}
	return &r, nil
}

// total is how many ledger rows src holds, from its rollups (cheap), or 0
// when it cannot tell; only progress uses it.
func total(ctx context.Context, src store.Reports) int64 {
	rows, err := src.Report(ctx, store.ReportQuery{Measures: []string{"requests"}})
	if err != nil {
		return 0
	}
	var n int64
	for _, r := range rows {
		n += r.Requests
	}
	return n
}

// progress writes "verb N of M rows" to w at most every progressEvery, and
// once at the end.
type progress struct {
	w     io.Writer
	verb  string
	total int64
	n     int64
	start time.Time
	last  time.Time
}

func newProgress(w io.Writer, verb string, total int64) *progress {
	now := time.Now()
	return &progress{w: w, verb: verb, total: total, start: now, last: now}
}

func (p *progress) add(n int) {
	p.n += int64(n)
	if now := time.Now(); now.Sub(p.last) >= progressEvery {
		p.last = now
		p.print()
	}
}

func (p *progress) print() {
	rate := float64(p.n) / max(time.Since(p.start).Seconds(), 1e-3)
	if p.total > 0 {
		fmt.Fprintf(p.w, "%s %d of %d rows (%.0f %%), %.0f rows/s\n", p.verb, p.n, p.total, 100*float64(p.n)/float64(p.total), rate)
		return
	}
	fmt.Fprintf(p.w, "%s %d rows, %.0f rows/s\n", p.verb, p.n, rate)
}

func (p *progress) done() {
	note := ""
	if p.verb != "exported" {
		note = " (rows already in the destination were skipped, never doubled)"
	}
	fmt.Fprintf(p.w, "%s %d rows in %s%s\n", p.verb, p.n, time.Since(p.start).Round(time.Millisecond), note)
}
