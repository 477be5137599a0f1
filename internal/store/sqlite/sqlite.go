// Package sqlite is the embedded Store: one SQLite file holding the ledger
// (a row per request) and the sampled details. It sits at the very end of
// the request flow, behind store.Writer, and is what a single tollgate
// replica uses by default; scale-out deployments use ClickHouse instead and
// pass the same conformance suite (store/storetest).
//
// SQLite has one writer, so inserts go through a single connection in one
// transaction per batch (group commit), while reads use a small pool that
// WAL lets run alongside the writer.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/store"
)

const (
	// busyTimeoutMS bounds how long a connection waits for another process
	// holding the file's lock (a backup, the CLI) before failing; the
	// Writer retries after that, so it needs no more than a few seconds.
	busyTimeoutMS = 5000
	// writerCacheKiB is the writer's page cache. SQLite's default (2 MiB)
	// holds too little of the ledger's indexes and rollups: an insert read
	// pages back from the file and spilled dirty ones mid-transaction
	// (BenchmarkLedger: a sixth of its CPU in page reads). It is a bound,
	// filled only as pages are used.
	writerCacheKiB = 16 << 10
	// readConns is the read pool. Reads are dashboard and CLI queries, a
	// handful at a time; WAL lets them run while the writer commits.
	readConns = 4
	// defaultLimit is Filter.Limit's zero value.
	defaultLimit = 100
)

// Store is a store.Store on one SQLite file.
type Store struct {
	path   string
	log    *slog.Logger
	w      *sql.DB // exactly one connection: SQLite has one writer
	r      *sql.DB
	insReq *sql.Stmt
	insDet *sql.Stmt
	// upserts[i] updates rollupTables[i].
	upserts []*sql.Stmt
	// loc is the report time zone: day and month rollups follow its
	// calendar, so "today" in a report is the operator's today.
	loc *time.Location
	// pend is the rollup sums of committed rows not yet written
	// (pending.go).
	pend pending
}

var _ store.Backend = (*Store)(nil)

// Option configures Open.
type Option func(*Store)

// WithLocation sets the report time zone (default UTC). Day rollups are
// bucketed in it when rows arrive, so changing it later affects new rows
// only.
func WithLocation(loc *time.Location) Option {
	return func(s *Store) {
		if loc != nil {
			s.loc = loc
		}
	}
}

var _ store.Store = (*Store)(nil)

// Open opens (creating if needed) the ledger at path and migrates it to the
// current schema. path is a file name, not a URI: in-memory databases are
// refused because the writer and the readers would each see their own.
func Open(ctx context.Context, path string, log *slog.Logger, opts ...Option) (*Store, error) {
	if err := checkPath(path); err != nil {
		return nil, fmt.Errorf("open ledger %q: %w", path, err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Store{path: path, log: log, loc: time.UTC}
	for _, o := range opts {
		o(s)
	}
	s.pend.acc = newRollupAcc(s.loc)
	s.pend.reset(-1)
	if err := s.open(ctx); err != nil {
		s.Close() //nolint:errcheck // the open error is the one that matters
		return nil, fmt.Errorf("open ledger %q: %w", path, err)
	}
	return s, nil
}

func checkPath(path string) error {
	switch {
	case path == "":
		return errors.New("empty path")
	case path == ":memory:" || strings.HasPrefix(path, "file:"):
		return errors.New("want a file path, not an SQLite URI or in-memory database")
	case strings.ContainsRune(path, '?'):
		// The driver splits its options off at the first '?'.
		return errors.New("path must not contain '?'")
	}
	return nil
}

func (s *Store) open(ctx context.Context) error {
	// The options are in the DSN rather than run once after opening so that
	// database/sql applies them again to any connection it re-opens.
	// _txlock=immediate takes the write lock at BEGIN: a deferred
	// transaction that upgrades later can fail with SQLITE_BUSY without
	// waiting for busy_timeout.
	var err error
	s.w, err = sql.Open("sqlite", fmt.Sprintf(
		"%s?_txlock=immediate&_busy_timeout=%d&_foreign_keys=1&_journal_mode=WAL&_synchronous=NORMAL&_pragma=cache_size(-%d)",
		s.path, busyTimeoutMS, writerCacheKiB))
	if err != nil {
		return err
	}
	s.w.SetMaxOpenConns(1)
	s.w.SetMaxIdleConns(1)

	from, to, err := migrate(ctx, s.w, time.Now(), s.loc)
	if err != nil {
		return err
	}
	if from != to {
		s.log.Info("ledger schema migrated", "path", s.path, "from", from, "to", to)
	}
	// WAL silently stays off on file systems without shared memory (some
	// network mounts); everything still works, but readers then block the
	// writer, which the operator should know about.
	var mode string
	if err := s.w.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return fmt.Errorf("read journal mode: %w", err)
	}
	if !strings.EqualFold(mode, "wal") {
		s.log.Warn("ledger is not in WAL mode; readers will block writes", "path", s.path, "journal_mode", mode)
	}

	// Readers are query_only so that a bug in a read path cannot write
	// outside the writer's transactions.
	s.r, err = sql.Open("sqlite", fmt.Sprintf("%s?_busy_timeout=%d&_foreign_keys=1&_query_only=1", s.path, busyTimeoutMS))
	if err != nil {
		return err
	}
	s.r.SetMaxOpenConns(readConns)
	s.r.SetMaxIdleConns(readConns)
	if err := s.r.PingContext(ctx); err != nil {
		return fmt.Errorf("open read pool: %w", err)
	}

	if s.insReq, err = s.w.PrepareContext(ctx, insertRequestSQL); err != nil {
		return fmt.Errorf("prepare insert: %w", err)
	}
	if s.insDet, err = s.w.PrepareContext(ctx, insertDetailSQL); err != nil {
		return fmt.Errorf("prepare insert details: %w", err)
	}
	for _, t := range rollupTables {
		st, err := s.w.PrepareContext(ctx, t.upsertSQL())
		if err != nil {
			return fmt.Errorf("prepare %s upsert: %w", t.name, err)
		}
		s.upserts = append(s.upserts, st)
	}
	// What a crash took from memory, summed again from the ledger.
	return s.syncRollups(ctx)
}

// Close closes the ledger. Records still queued in a store.Writer are not
// written: stop the Writer first.
func (s *Store) Close() error {
	var errs []error
	if s.upserts != nil {
		// Not an error to return: the rows are in the ledger, and the
		// next Open sums them again.
		if err := s.syncRollups(context.Background()); err != nil {
			s.log.Warn("ledger rollups not written on close; the next open will", "path", s.path, "err", err)
		}
	}
	for _, st := range append([]*sql.Stmt{s.insReq, s.insDet}, s.upserts...) {
		if st != nil {
			errs = append(errs, st.Close())
		}
	}
	if s.r != nil {
		errs = append(errs, s.r.Close())
	}
	if s.w != nil {
		// Keeps the query planner's statistics fresh at almost no cost,
		// as SQLite recommends on closing a long-lived connection.
		if _, err := s.w.Exec("PRAGMA optimize"); err != nil {
			s.log.Debug("ledger optimize on close failed", "path", s.path, "err", err)
		}
		errs = append(errs, s.w.Close())
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("close ledger %q: %w", s.path, err)
	}
	return nil
}

// Insert writes recs in one transaction. A Record already stored (same
// RequestID) is skipped, so replaying a batch after a failed commit or a
// crash never counts a request twice. That costs no read, so
// b.FirstDelivery changes nothing here.
func (s *Store) Insert(ctx context.Context, b store.Batch) error {
	recs := b.Records
	if len(recs) == 0 {
		return nil
	}
	if err := s.insert(ctx, recs); err != nil {
		return fmt.Errorf("insert %d records into ledger %q: %w", len(recs), s.path, err)
	}
	return nil
}

func (s *Store) insert(ctx context.Context, recs []*record.Record) (err error) {
	s.pend.mu.Lock()
	defer s.pend.mu.Unlock()
	// The batch's sums go straight into the pending ones; added lets a
	// failed commit take them out again.
	p := &s.pend
	var added []int
	defer func() {
		if err == nil {
			return
		}
		for _, i := range added {
			f := *recs[i]
			f.Finish()
			p.acc.add(&f, -1)
		}
	}()
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	// BEGIN IMMEDIATE took the write lock, so nothing below waits on
	// another connection: the statements need not watch ctx. The driver
	// starts a goroutine per statement to watch a context that can end,
	// which was ≈ 5 % of the ledger's CPU (BenchmarkLedger).
	ctx = context.WithoutCancel(ctx)
	req := tx.StmtContext(ctx, s.insReq)
	det := tx.StmtContext(ctx, s.insDet)
	args := make([]any, 0, len(ledger))
	if len(p.acc.keys) == 0 {
		p.since = time.Now()
	}
	var last int64 // the largest rowid this batch added
	for i, r := range recs {
		if r == nil {
			continue
		}
		yield(i)
		// Finish a copy: the derived columns must agree with the marks
		// even if the caller forgot, and the caller's Record is not ours
		// to modify.
		f := *r
		f.Finish()
		args = rowArgs(args[:0], &f)
		res, err := req.ExecContext(ctx, args...)
		if err != nil {
			return fmt.Errorf("request %q: %w", r.RequestID, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return fmt.Errorf("request %q: %w", r.RequestID, err)
		}
		// Rollups and details only with a new ledger row: a replay must
		// neither count twice nor graft a timeline onto what the first
		// write stored.
		if n != 1 {
			continue
		}
		if last, err = res.LastInsertId(); err != nil {
			return fmt.Errorf("request %q: %w", r.RequestID, err)
		}
		p.acc.add(&f, +1)
		added = append(added, i)
		if r.Sampled {
			if _, err := det.ExecContext(ctx, r.RequestID, timelineJSON(r.Timeline)); err != nil {
				return fmt.Errorf("details of %q: %w", r.RequestID, err)
			}
		}
	}
	if !p.due(time.Now()) {
		if err := tx.Commit(); err != nil {
			return err
		}
		p.last = max(p.last, last)
		return nil
	}
	mark, err := s.writeRollups(ctx, tx, last)
	if err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	p.reset(mark)
	return nil
}

// yieldEvery is how many rows or rollup rows the writer handles before it
// lets other goroutines run. A batch is thousands of rows, hundreds of
// milliseconds of CPU; on a gateway with one core the streams' goroutines
// would wait for the scheduler's 10 ms time slice while it ran (first
// tokens 14–22 ms late at 256 streams). Yielding every 16 rows bounds the
// wait to about a millisecond, for a Gosched per 16 rows.
const yieldEvery = 16

func yield(i int) {
	if i%yieldEvery == yieldEvery-1 {
		runtime.Gosched()
	}
}

// Requests returns the ledger rows matching f, newest first. It reads the
// ledger only: Timeline is always empty here (use Request for details).
func (s *Store) Requests(ctx context.Context, f store.Filter) ([]*record.Record, error) {
	if _, err := f.SortColumn(); err != nil {
		return nil, err
	}
	q, args := requestsQuery(f)
	recs, err := s.query(ctx, q, false, args...)
	if err != nil {
		return nil, fmt.Errorf("query ledger %q: %w", s.path, err)
	}
	return recs, nil
}

func requestsQuery(f store.Filter) (string, []any) {
	var (
		where []string
		args  []any
	)
	add := func(cond string, arg any) {
		where = append(where, cond)
		args = append(args, arg)
	}
	if !f.Since.IsZero() {
		add("arrival >= ?", f.Since.UnixNano())
	}
	if !f.Until.IsZero() {
		add("arrival < ?", f.Until.UnixNano())
	}
	if f.UserID != "" {
		add("user_id = ?", f.UserID)
	}
	if f.BizLine != "" {
		add("biz_line = ?", f.BizLine)
	}
	if f.Model != "" {
		add("model = ?", f.Model)
	}
	if f.TraceID != "" {
		add("trace_id = ?", f.TraceID)
	}
	if f.ClientRequestID != "" {
		add("client_request_id = ?", f.ClientRequestID)
	}
	if f.TemplateID != "" {
		add("template_id = ?", f.TemplateID)
	}
	if f.Endpoint != "" {
		add("endpoint = ?", f.Endpoint)
	}
	if f.EndUser != "" {
		add("end_user = ?", f.EndUser)
	}
	if f.Status != 0 {
		add("status = ?", f.Status)
	}
	if f.ErrorsOnly {
		where = append(where, "error_type != ''")
	}
	if f.MinE2E > 0 {
		add("e2e_ns >= ?", int64(f.MinE2E))
	}
	limit := f.Limit
	if limit <= 0 {
		limit = defaultLimit
	}
	q := "SELECT " + selectColumns + " FROM requests"
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	// rowid breaks ties so that pages are stable; every index on arrival
	// ends in rowid implicitly, so the order is read straight off the
	// index and LIMIT stops the scan early, with no sort.
	if c, _ := f.SortColumn(); c != "" {
		// SQLite sorts NULL below every value: rows without the figure
		// come last. A sort reads the whole filtered period.
		q += " ORDER BY " + c + " DESC, arrival DESC, rowid DESC LIMIT ?"
		return q, append(args, limit)
	}
	q += " ORDER BY arrival DESC, rowid DESC LIMIT ?"
	return q, append(args, limit)
}

// Request returns every attempt of one request, ordered by attempt, with
// the timeline of the sampled ones. id is a RequestID (of any attempt) or a
// LogicalRequestID.
func (s *Store) Request(ctx context.Context, id string) ([]*record.Record, error) {
	if id == "" {
		return nil, fmt.Errorf("%w: empty id", store.ErrNotFound)
	}
	recs, err := s.query(ctx, requestSQL, true, id)
	if err != nil {
		return nil, fmt.Errorf("read request %q from ledger %q: %w", id, s.path, err)
	}
	if len(recs) == 0 {
		return nil, fmt.Errorf("%w: %q", store.ErrNotFound, id)
	}
	return recs, nil
}

// query runs a SELECT of selectColumns, followed by the timeline when
// withTimeline is set.
func (s *Store) query(ctx context.Context, q string, withTimeline bool, args ...any) ([]*record.Record, error) {
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var (
		recs     []*record.Record
		dsts     []any
		timeline sql.NullString
	)
	for rows.Next() {
		r := new(record.Record)
		dsts = scanDests(dsts[:0], r)
		if withTimeline {
			dsts = append(dsts, &timeline)
		}
		if err := rows.Scan(dsts...); err != nil {
			return nil, err
		}
		if withTimeline && timeline.Valid {
			if r.Timeline, err = record.ParseTimeline(timeline.String); err != nil {
				return nil, fmt.Errorf("decode timeline of %q: %w", r.RequestID, err)
			}
		}
		r.Finish()
		recs = append(recs, r)
	}
	return recs, rows.Err()
}
