package clickhouse

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/store"
)

// Rollups. Reports read these tables, never the ledger:
//
//   - rollup_hour: the sums per piece × model, served model, upstream, biz
//     line, user, key, template and currency. A piece is a UTC hour, cut
//     in two where a local midnight of the rollup zone falls inside it
//     (zones off the UTC hour, such as India's), so every piece lies in
//     one UTC hour and one local day: hours, local days and local months
//     are all exact sums of pieces, and the piece's local day is stored
//     with it.
//   - rollup_minute: per UTC minute × model, upstream, biz line, currency.
//   - prompt_hour: per piece × prompt hash, model, template, currency.
//
// Why not a materialised view that sums on insert: records arrive at
// least once (WAL replays, racing replicas), and a view would count a
// replay twice. Instead a piece's rows are recomputed from requests FINAL
// (deduplicated, amendments applied) and written as a new version of the
// whole piece; readers take, per piece, only the rows of its latest
// version. Recomputing a piece is idempotent, so several replicas may run
// the pass at once.
//
// Which pieces need it: every write to the ledger (Insert, including a
// replay of stored ids, SetEngineTiming, Rerate) adds a mark (piece, random
// id) to rollup_dirty after its rows. The pass (RollUp) reads the marks
// not yet covered, recomputes their pieces and records in rollup_done
// which marks which version covered: every mark of the piece that existed
// when it read the ledger. A mark counts as covered only by the piece's
// winning (latest) version, so a slower replica's pass that read an older
// snapshot can never hide a write. Report and Prune run the pass
// first, so a report always includes every write made before it began.
//
// Pieces never recomputed: those before the ledger's retention cut (their
// rows are partly gone) and those of days the rollup retention dropped.
// Both horizons are kept in rollup_state, with the rollup zone.

const (
	rollupHour   = "rollup_hour"
	rollupMinute = "rollup_minute"
	promptHour   = "prompt_hour"
	rollupDirty  = "rollup_dirty"
	rollupDone   = "rollup_done"
	rollupState  = "rollup_state"
)

// The dimension columns of each rollup, in key order.
var (
	hourDims   = []string{"model", "served_model", "upstream", "biz_line", "user_id", "key_id", "template_id", "currency"}
	minuteCols = []string{"model", "upstream", "biz_line", "currency"}
	promptDims = []string{"prompt_sha256", "model", "template_id", "currency"}
)

// ledgerReadColumns are the ledger columns the recompute reads: the
// dimensions and whatever measureSQL sums; never the timeline.
const ledgerReadColumns = `day, arrival_ns, model, served_model, upstream, biz_line, user_id, key_id, template_id, currency,
	prompt_sha256, error_type, client_disconnect, cache_hit, input_tokens, cached_input_tokens, output_tokens,
	reasoning_tokens, cost_nanos, finish_reason, usage_source, upstream_status, retries, e2e_ns, ttft_ns, prompt_bytes, endpoint,
	max_tokens, seg_gateway_queue_ns, seg_connect_ns, seg_engine_queue_ns, seg_prefill_ns, seg_decode_ns,
	seg_client_write_ns, seg_post_processing_ns, seg_unattributed_ns`

func rollupDDL(db string) []string {
	t := func(name string) string { return quoteIdent(db) + "." + name }
	var ms strings.Builder
	for _, m := range store.Measures {
		fmt.Fprintf(&ms, "%s Int64, ", m.Name)
	}
	strs := func(cols []string) string { return strings.Join(cols, " String, ") + " String" }
	return []string{
		`CREATE TABLE IF NOT EXISTS ` + t(rollupHour) + ` (d Date, bucket Int64, local_day String, ` + strs(hourDims) + `, ` +
			ms.String() + `ver UInt64) ENGINE = ReplacingMergeTree(ver) PARTITION BY toYYYYMM(d) ORDER BY (bucket, ` + strings.Join(hourDims, ", ") + `)`,
		`CREATE TABLE IF NOT EXISTS ` + t(rollupMinute) + ` (d Date, piece Int64, bucket Int64, ` + strs(minuteCols) + `, ` +
			ms.String() + `ver UInt64) ENGINE = ReplacingMergeTree(ver) PARTITION BY toYYYYMM(d) ORDER BY (piece, bucket, ` + strings.Join(minuteCols, ", ") + `)`,
		`CREATE TABLE IF NOT EXISTS ` + t(promptHour) + ` (d Date, piece Int64, local_day String, ` + strs(promptDims) + `, ` +
			ms.String() + `ver UInt64) ENGINE = ReplacingMergeTree(ver) PARTITION BY toYYYYMM(d) ORDER BY (piece, ` + strings.Join(promptDims, ", ") + `)`,
		`CREATE TABLE IF NOT EXISTS ` + t(rollupDirty) + ` (piece Int64, mark UInt64, at Int64) ENGINE = MergeTree ORDER BY (piece, mark)`,
		`CREATE TABLE IF NOT EXISTS ` + t(rollupDone) + ` (piece Int64, mark UInt64, ver UInt64, at Int64) ENGINE = MergeTree ORDER BY (piece, mark)`,
		`CREATE TABLE IF NOT EXISTS ` + t(rollupState) + ` (name String, num Int64, text String, at Int64) ENGINE = MergeTree ORDER BY name`,
	}
}

// openRollups fixes the rollup zone: the earliest one recorded, so that
// pieces written before and after a change of Config.Location never
// overlap. On a database without one, s.zone (Config.RollupZone) is
// recorded — and then the earliest record read back and adopted: replicas
// opening an empty database together each find none and each record
// their own, and all of them must cut pieces in the one readers take,
// or an 18:00 whole-hour piece and an 18:30 half-hour piece would both
// be counted. A report in another zone reads whole UTC hours, as the
// SQLite store does for a zone other than its own.
func (s *Store) openRollups(ctx context.Context) error {
	name, err := s.rollupZone(ctx)
	if err != nil {
		return err
	}
	if name == "" {
		if err := s.setState(ctx, "zone", 0, s.zone.String()); err != nil {
			return err
		}
		if testHookZoneRecorded != nil {
			testHookZoneRecorded(s.db)
		}
		if name, err = s.rollupZone(ctx); err != nil {
			return err
		}
		if name == "" {
			return fmt.Errorf("read rollup zone: none recorded after writing %q", s.zone.String())
		}
	}
	if name != s.zone.String() {
		z, err := time.LoadLocation(name)
		if err != nil {
			return fmt.Errorf("rollup zone %q (recorded when the rollups were created): %w", name, err)
		}
		s.zone = z
	}
	if name != s.loc.String() {
		s.log.Warn("report time zone differs from the one the rollups were built in; days and months in it are read from UTC hours",
			"zone", s.loc.String(), "rollup_zone", name)
	}
	return nil
}

// testHookZoneRecorded, when set, runs between recording the rollup zone
// and reading it back (a test's other replica).
var testHookZoneRecorded func(db string)

// rollupZone returns the earliest recorded rollup zone, "" when none.
func (s *Store) rollupZone(ctx context.Context) (string, error) {
	var names []string
	q := "SELECT text FROM " + s.table(rollupState) + " WHERE name = 'zone' ORDER BY at, text LIMIT 1 FORMAT RowBinary"
	if err := s.c.query(ctx, q, func(d *dec) error {
		for d.more() {
			names = append(names, d.str())
		}
		return d.err
	}); err != nil {
		return "", fmt.Errorf("read rollup zone: %w", err)
	}
	if len(names) == 0 {
		return "", nil
	}
	return names[0], nil
}

func (s *Store) setState(ctx context.Context, name string, num int64, text string) error {
	e := &enc{}
	e.str(name)
	e.i64(num)
	e.str(text)
	e.i64(s.now().UnixNano())
	if err := s.c.insert(ctx, "INSERT INTO "+s.table(rollupState)+" (name, num, text, at) FORMAT RowBinary", e.b); err != nil {
		return fmt.Errorf("record %s: %w", name, err)
	}
	return nil
}

// rollupHorizons are what retention has made final.
type rollupHorizons struct {
	ledgerNS      int64  // ledger rows before this instant were pruned
	rollupDay     string // rollup rows of local days before this were pruned
	promptSingles string // prompts seen once on a day before this are not listed
}

func (s *Store) horizons(ctx context.Context) (rollupHorizons, error) {
	h := rollupHorizons{ledgerNS: noArrival}
	q := "SELECT name, max(num), max(text) FROM " + s.table(rollupState) + " GROUP BY name FORMAT RowBinary"
	err := s.c.query(ctx, q, func(d *dec) error {
		for d.more() {
			name, num, text := d.str(), d.i64(), d.str()
			switch name {
			case "ledger_horizon":
				h.ledgerNS = num
			case "rollup_horizon":
				h.rollupDay = text
			case "prompt_singles":
				h.promptSingles = text
			}
		}
		return d.err
	})
	return h, err
}

// pieceOf is the start (Unix seconds) of t's piece: its UTC hour's start,
// or the local midnight in zone inside that hour.
func pieceOf(t time.Time, zone *time.Location) int64 {
	return max(floorDiv(t.Unix(), 3600)*3600, store.FloorDay(t, zone).Unix())
}

// piece is one piece to recompute: [start, end) in Unix seconds and its
// local day.
type piece struct {
	start, end int64
	day        string
}

func pieceAt(start int64, zone *time.Location) piece {
	t := time.Unix(start, 0)
	end := min(floorDiv(start, 3600)*3600+3600, store.NextDay(t, zone).Unix())
	return piece{start, end, t.In(zone).Format(time.DateOnly)}
}

// mark records that recs' pieces changed. Records without an arrival are
// in no piece (and in no report).
func (s *Store) mark(ctx context.Context, recs []*record.Record) error {
	seen := map[int64]bool{}
	e := &enc{}
	at := s.now().UnixNano()
	for _, r := range recs {
		if r == nil || r.Arrival.IsZero() {
			continue
		}
		p := pieceOf(r.Arrival, s.zone)
		if seen[p] {
			continue
		}
		seen[p] = true
		e.i64(p)
		e.u64(rand.Uint64())
		e.i64(at)
	}
	if len(seen) == 0 {
		return nil
	}
	if err := s.c.insert(ctx, "INSERT INTO "+s.table(rollupDirty)+" (piece, mark, at) FORMAT RowBinary", e.b); err != nil {
		return fmt.Errorf("mark rollups to recompute: %w", err)
	}
	return nil
}

// pendingMarks returns the marks no winning version covers, by piece.
func (s *Store) pendingMarks(ctx context.Context) (map[int64][]uint64, error) {
	dirty, done, hour := s.table(rollupDirty), s.table(rollupDone), s.table(rollupHour)
	q := fmt.Sprintf(`SELECT piece, mark FROM %s WHERE (piece, mark) NOT IN (
		SELECT piece, mark FROM %s WHERE (piece, ver) IN (
			SELECT bucket, max(ver) FROM %s WHERE bucket IN (SELECT piece FROM %s) GROUP BY bucket))
		FORMAT RowBinary`, dirty, done, hour, dirty)
	out := map[int64][]uint64{}
	err := s.c.query(ctx, q, func(d *dec) error {
		for d.more() {
			p, m := d.i64(), d.u64()
			if d.err == nil {
				out[p] = append(out[p], m)
			}
		}
		return d.err
	})
	return out, err
}

// marksOf returns every mark of the pieces listed, by piece.
func (s *Store) marksOf(ctx context.Context, pieces string) (map[int64][]uint64, error) {
	out := map[int64][]uint64{}
	q := "SELECT piece, mark FROM " + s.table(rollupDirty) + " WHERE piece IN (" + pieces + ") FORMAT RowBinary"
	err := s.c.query(ctx, q, func(d *dec) error {
		for d.more() {
			p, m := d.i64(), d.u64()
			if d.err == nil {
				out[p] = append(out[p], m)
			}
		}
		return d.err
	})
	if err != nil {
		return nil, fmt.Errorf("read marks: %w", err)
	}
	return out, nil
}

// rollChunk bounds the pieces one recompute statement covers: each row
// of the ledger is placed in its piece by a scan of this many bounds.
const rollChunk = 240

// RollUp brings the rollups up to date: every piece written since its
// last recompute is recomputed from the ledger. Report and Prune call it
// first; serve also runs it every minute so that reports find little to
// do. Safe to run on several replicas at once.
func (s *Store) RollUp(ctx context.Context) error {
	if err := s.Connected(); err != nil {
		return err
	}
	if err := s.rollUp(ctx); err != nil {
		return fmt.Errorf("roll up: %w", err)
	}
	return nil
}

func (s *Store) rollUp(ctx context.Context) error {
	s.rollMu.Lock()
	defer s.rollMu.Unlock()
	pend, err := s.pendingMarks(ctx)
	if err != nil || len(pend) == 0 {
		return err
	}
	h, err := s.horizons(ctx)
	if err != nil {
		return err
	}
	var ps []piece
	for _, start := range slices.Sorted(mapKeys(pend)) {
		p := pieceAt(start, s.zone)
		// A piece whose ledger rows were partly pruned, or whose rollups
		// retention dropped, keeps what it has.
		if start*1e9 < h.ledgerNS || p.day < h.rollupDay {
			continue
		}
		ps = append(ps, p)
	}
	for chunk := range slices.Chunk(ps, rollChunk) {
		if err := s.recompute(ctx, chunk); err != nil {
			return err
		}
	}
	return nil
}

// recompute writes a new version of each piece of ps (sorted) from the
// ledger, then records the marks it covered.
func (s *Store) recompute(ctx context.Context, ps []piece) error {
	starts, startsNS, endsNS, days := make([]string, len(ps)), make([]string, len(ps)), make([]string, len(ps)), make([]string, len(ps))
	for i, p := range ps {
		starts[i] = quoteInt(p.start)
		startsNS[i] = quoteInt(p.start * 1e9)
		endsNS[i] = quoteInt(p.end * 1e9)
		days[i] = quoteString(p.day)
	}
	list := strings.Join(starts, ", ")
	ver, err := s.nextVer(ctx, list)
	if err != nil {
		return err
	}
	// Every mark of these pieces, read before the ledger is: the rows of
	// each were written before it, so this recompute covers them all, the
	// ones an older version covered too (a mark counts as covered only by
	// its piece's winning version).
	marks, err := s.marksOf(ctx, list)
	if err != nil {
		return err
	}
	lo, hi := time.Unix(ps[0].start, 0), time.Unix(ps[len(ps)-1].end, 0)
	// The rows of the chunk's pieces, each with the index of its piece.
	rows := fmt.Sprintf(`(SELECT %s, arrayCount(x -> x <= arrival_ns, [%s]) AS idx FROM %s FINAL
		WHERE day >= %s AND day <= %s AND arrival_ns >= %s AND arrival_ns < %s)
		WHERE idx > 0 AND arrival_ns < arrayElement([%s], idx)`,
		ledgerReadColumns, strings.Join(startsNS, ", "), s.table("requests"),
		quoteDay(day(lo)), quoteDay(day(hi)), quoteInt(lo.UnixNano()), quoteInt(hi.UnixNano()), strings.Join(endsNS, ", "))
	pieceExpr := "toInt64(arrayElement([" + list + "], idx))"
	dayExpr := "arrayElement([" + strings.Join(days, ", ") + "], idx)"
	var sums []string
	var names []string
	for _, m := range store.Measures {
		sums = append(sums, "toInt64("+measureSQL[m.Name]+")")
		names = append(names, m.Name)
	}
	insert := func(table string, cols []string, keys []string, where string) error {
		sel := make([]string, len(keys))
		group := make([]string, len(keys))
		for i, k := range keys {
			group[i] = fmt.Sprintf("k%d", i)
			sel[i] = k + " AS " + group[i]
		}
		q := fmt.Sprintf("INSERT INTO %s (d, %s, %s, ver) SELECT day, %s, %s, toUInt64(%d) FROM %s%s GROUP BY day, %s",
			s.table(table), strings.Join(cols, ", "), strings.Join(names, ", "),
			strings.Join(sel, ", "), strings.Join(sums, ", "), ver, rows, where, strings.Join(group, ", "))
		if err := s.c.exec(ctx, "", q); err != nil {
			return fmt.Errorf("recompute %s: %w", table, err)
		}
		return nil
	}
	str := func(cols []string) []string {
		out := make([]string, len(cols))
		for i, c := range cols {
			out[i] = "toString(" + c + ")"
		}
		return out
	}
	// The minutes and prompts first: the pass counts as done only once
	// rollup_hour, whose version decides, has its rows.
	if err := insert(rollupMinute, append([]string{"piece", "bucket"}, minuteCols...),
		append([]string{pieceExpr, "toInt64(intDiv(arrival_ns, 60000000000) * 60)"}, str(minuteCols)...), ""); err != nil {
		return err
	}
	if err := insert(promptHour, append([]string{"piece", "local_day"}, promptDims...),
		append([]string{pieceExpr, dayExpr}, str(promptDims)...), " AND prompt_sha256 != ''"); err != nil {
		return err
	}
	if err := insert(rollupHour, append([]string{"bucket", "local_day"}, hourDims...),
		append([]string{pieceExpr, dayExpr}, str(hourDims)...), ""); err != nil {
		return err
	}
	e := &enc{}
	at := s.now().UnixNano()
	for _, p := range ps {
		for _, m := range marks[p.start] {
			e.i64(p.start)
			e.u64(m)
			e.u64(ver)
			e.i64(at)
		}
	}
	if err := s.c.insert(ctx, "INSERT INTO "+s.table(rollupDone)+" (piece, mark, ver, at) FORMAT RowBinary", e.b); err != nil {
		return fmt.Errorf("record recomputed pieces: %w", err)
	}
	return nil
}

// nextVer is the version of a recompute of the pieces listed: above every
// version they have, whatever this replica's clock says, so that the
// latest recompute always wins.
func (s *Store) nextVer(ctx context.Context, pieces string) (uint64, error) {
	q := fmt.Sprintf(`SELECT max(v) FROM (
		SELECT max(ver) AS v FROM %s WHERE bucket IN (%s)
		UNION ALL SELECT max(ver) AS v FROM %s WHERE piece IN (%s)
		UNION ALL SELECT max(ver) AS v FROM %s WHERE piece IN (%s)) FORMAT RowBinary`,
		s.table(rollupHour), pieces, s.table(rollupMinute), pieces, s.table(promptHour), pieces)
	var have uint64
	err := s.c.query(ctx, q, func(d *dec) error {
		for d.more() {
			have = d.u64()
		}
		return d.err
	})
	if err != nil {
		return 0, fmt.Errorf("read rollup versions: %w", err)
	}
	v := max(uint64(s.now().UnixNano()), have+1, s.lastVer+1)
	s.lastVer = v
	return v, nil
}

// latest is the condition that keeps, of table, the rows of each piece's
// latest version; cond bounds the pieces looked at.
func (s *Store) latest(table, pieceCol, cond string) string {
	return fmt.Sprintf("(%s, ver) IN (SELECT %s, max(ver) FROM %s WHERE %s GROUP BY %s)", pieceCol, pieceCol, s.table(table), cond, pieceCol)
}

// pruneRollups applies the retention to the rollups and records what is
// final; it returns how many rollup rows went.
func (s *Store) pruneRollups(ctx context.Context, now time.Time, r store.Retention) (int64, error) {
	var total int64
	// Prompts seen once on a closed day are not listed any more (the
	// SQLite store deletes them; here reads skip them).
	if err := s.setState(ctx, "prompt_singles", 0, now.In(s.zone).Format(time.DateOnly)); err != nil {
		return 0, err
	}
	if r.Day > 0 {
		cut := now.Add(-r.Day)
		// Whole months go, the days with their month, as in SQLite:
		// reports read the same sums whatever grain answers.
		y, m, _ := cut.In(s.zone).Date()
		monthDay := time.Date(y, m, 1, 0, 0, 0, 0, time.UTC).Format(time.DateOnly)
		if err := s.setState(ctx, "rollup_horizon", 0, monthDay); err != nil {
			return 0, err
		}
		for _, j := range []struct{ table, before string }{
			{rollupHour, monthDay},
			{promptHour, cut.In(s.zone).Format(time.DateOnly)},
		} {
			n, err := s.mutate(ctx, j.table, "local_day < "+quoteString(j.before), "")
			total += n
			if err != nil {
				return total, fmt.Errorf("prune %s: %w", j.table, err)
			}
		}
	}
	if r.Minute > 0 {
		n, err := s.mutate(ctx, rollupMinute, "bucket < "+quoteInt(now.Add(-r.Minute).Unix()), "")
		total += n
		if err != nil {
			return total, fmt.Errorf("prune %s: %w", rollupMinute, err)
		}
	}
	return total, nil
}

// markKeep is how long covered marks are kept: long enough that no
// replica's clock is that far behind another's.
const markKeep = time.Hour

// pruneMarks deletes the marks older than markKeep that are covered (or
// beyond the horizons, never to be recomputed), and their done rows.
func (s *Store) pruneMarks(ctx context.Context) error {
	pend, err := s.pendingMarks(ctx)
	if err != nil {
		return err
	}
	h, err := s.horizons(ctx)
	if err != nil {
		return err
	}
	var keep []string
	for p := range pend {
		if p*1e9 >= h.ledgerNS && pieceAt(p, s.zone).day >= h.rollupDay {
			keep = append(keep, quoteInt(p))
		}
	}
	where := "at < " + quoteInt(s.now().Add(-markKeep).UnixNano())
	if len(keep) > 0 {
		where += " AND piece NOT IN (" + strings.Join(keep, ", ") + ")"
	}
	for _, t := range []string{rollupDirty, rollupDone} {
		if _, err := s.mutate(ctx, t, where, ""); err != nil {
			return fmt.Errorf("prune %s: %w", t, err)
		}
	}
	return nil
}

// Prompts returns the prompts (by hash, model and template) sent at least
// minCount times on the rollup zone's days from from's to to's
// (exclusive), most requests first, with store.PromptMeasures only (as
// the SQLite store, whose prompt_day keeps no others). Of closed days
// that retention has passed over, prompts seen once that day are left
// out, as the SQLite store deletes them.
func (s *Store) Prompts(ctx context.Context, from, to time.Time, minCount int64, limit int) ([]store.PromptRow, error) {
	if err := s.Connected(); err != nil {
		return nil, err
	}
	out, err := s.prompts(ctx, from, to, minCount, limit)
	if err != nil {
		return nil, fmt.Errorf("prompts: %w", err)
	}
	return out, nil
}

func (s *Store) prompts(ctx context.Context, from, to time.Time, minCount int64, limit int) ([]store.PromptRow, error) {
	if limit <= 0 {
		limit = 100
	}
	if err := s.rollUp(ctx); err != nil {
		return nil, err
	}
	h, err := s.horizons(ctx)
	if err != nil {
		return nil, err
	}
	fromDay, toDay := "0000-00-00", "9999-99-99"
	if !from.IsZero() {
		fromDay = from.In(s.zone).Format(time.DateOnly)
	}
	if !to.IsZero() {
		toDay = to.In(s.zone).Format(time.DateOnly)
	}
	cond := "local_day >= " + quoteString(fromDay) + " AND local_day < " + quoteString(toDay)
	// m0 is requests, PromptMeasures' first.
	var inner, outer []string
	for i, m := range store.PromptMeasures {
		inner = append(inner, fmt.Sprintf("sum(%s) AS m%d", m.Name, i))
		outer = append(outer, fmt.Sprintf("toInt64(sum(m%d))", i))
	}
	q := fmt.Sprintf(`SELECT prompt_sha256, model, template_id, currency, %s FROM (
			SELECT local_day, prompt_sha256, model, template_id, currency, %s FROM %s FINAL
			WHERE %s AND %s GROUP BY local_day, prompt_sha256, model, template_id, currency
			HAVING NOT (local_day < %s AND m0 <= 1))
		GROUP BY prompt_sha256, model, template_id, currency HAVING sum(m0) >= %s
		ORDER BY sum(m0) DESC, prompt_sha256, model, template_id, currency LIMIT %s FORMAT RowBinary`,
		strings.Join(outer, ", "), strings.Join(inner, ", "), s.table(promptHour), cond, s.latest(promptHour, "piece", cond),
		quoteString(h.promptSingles), quoteInt(minCount), quoteInt(int64(limit)))
	var out []store.PromptRow
	err = s.c.query(ctx, q, func(d *dec) error {
		for d.more() {
			p := store.PromptRow{PromptSHA256: d.str(), Model: d.str(), TemplateID: d.str()}
			_ = d.str() // currency: a prompt's rows are per currency, as in SQLite
			for _, m := range store.PromptMeasures {
				*m.Field(&p.Totals) = d.i64()
			}
			if d.err == nil {
				out = append(out, p)
			}
		}
		return d.err
	})
	return out, err
}
