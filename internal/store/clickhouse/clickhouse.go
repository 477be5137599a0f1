// Package clickhouse is the scale-out Store: the ledger of every request in
// a ClickHouse table, shared by many tollgate replicas. It sits at the end
// of the request flow, behind store.Writer, exactly where the embedded
// SQLite store sits on a single replica, and passes the same conformance
// suite (store/storetest).
//
// It speaks ClickHouse's HTTP interface with net/http, writing and reading
// RowBinary: the one client path that works from Debian's 18.16 to current
// servers (see docs/operations.md, "ClickHouse", for what was measured).
//
// Reports read rollups (rollup.go): sums per piece (a UTC hour, cut at the
// rollup zone's midnights), per minute and per prompt, each piece
// recomputed from the deduplicated ledger whenever a write marked it, so
// that replays never count twice and reports outlive the ledger's
// retention. Amendments (late engine timings, re-rating) are new versions
// of a row, not mutations (amend.go). The spill queue while ClickHouse is
// down is the gateway's write-ahead queue (internal/wal), which ships into
// any store.Store; for serve, the Store can also be opened while the
// server is down and connect once it answers (Config.Background,
// connect.go).
package clickhouse

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"mime/multipart"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/store"
)

const (
	// defaultLimit is Filter.Limit's zero value, as in every store.
	defaultLimit = 100
	// checkChunk bounds the ids in one "already stored?" query that lists
	// them in its text (the ledger's sends them as data instead): a query's
	// text is limited (max_query_size, 256 KiB by default).
	checkChunk = 1000
	// DefaultDatabase is used when Config.Database is empty.
	DefaultDatabase = "tollgate"
)

// Config says where the server is.
type Config struct {
	// HTTP is the base URL of the HTTP interface, e.g.
	// http://127.0.0.1:8123. User and password, if any, go in its
	// userinfo (http://user:pass@host:8123) and are sent as basic auth.
	HTTP string
	// Database holds the tables; it is created if missing. Default
	// "tollgate".
	Database string
	// Timeout bounds each call to the server, so that a server that hangs
	// fails the call (and the queue in front retries it) rather than
	// holding it forever. Default 30s.
	Timeout time.Duration
	// Client is the HTTP client; nil uses one of the store's own.
	Client *http.Client
	// Location is the report time zone: days and months of reports follow
	// its calendar unless a query names another (default UTC). The
	// rollups keep the zone they were created in (see rollup.go); after a
	// change, days and months in the new zone are read from UTC hours, as
	// for a query in another zone.
	Location *time.Location
	// RollupZone is the zone the rollups are built in when the database
	// has none recorded yet: the deployment's store.timezone, never a
	// one-off report zone (a CLI --tz). Default Location. Once recorded,
	// the earliest recorded zone wins over this (see openRollups).
	RollupZone *time.Location
	// Background makes Open return the Store even when the server does
	// not answer, and keep connecting in the background until it does
	// (see connect.go); meanwhile every call fails with an error wrapping
	// store.ErrNotConnected. Open still fails on a bad address or
	// database name. serve sets it; commands that read reports do not,
	// so they fail at once when the server is down.
	Background bool
}

// defaultTimeout is Config.Timeout's zero value: ample for a batch of
// thousands of rows or a listing, short enough to notice a hung server.
const defaultTimeout = 30 * time.Second

// Store is a store.Store on a ClickHouse database.
type Store struct {
	c        *client
	db       string
	log      *slog.Logger
	version  Version
	features Features
	own      *http.Transport // closed by Close when the client is ours
	// mu serialises Insert's check-then-write, which makes idempotency by
	// request_id exact within one process. See Insert for several.
	mu sync.Mutex
	// capMu does the same for AddCaptures, apart from mu so a batch of
	// captures never holds up the ledger's writes.
	capMu sync.Mutex
	// now is the clock behind the write version.
	now func() time.Time
	loc *time.Location // the report time zone
	// zone is the rollup zone: the local days pieces are cut at (see
	// rollup.go), fixed when the rollups were created.
	zone *time.Location
	// rollMu serialises this process's roll-up passes; lastVer is the
	// version of its last recompute.
	rollMu  sync.Mutex
	lastVer uint64

	// The connection (connect.go): methods read version, features and
	// zone only once connected is set; connMu serialises the attempts,
	// lastErr is the last one's failure.
	connected   atomic.Bool
	connMu      sync.Mutex
	lastErr     atomic.Pointer[error]
	stopConnect context.CancelFunc // nil unless connecting in the background
	connectDone chan struct{}
}

var _ store.Store = (*Store)(nil)

var dbName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Open connects to the server, detects its version and creates the
// database and tables if missing; with cfg.Background it returns the
// Store when the server does not answer and connects later.
func Open(ctx context.Context, cfg Config, log *slog.Logger) (*Store, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Database == "" {
		cfg.Database = DefaultDatabase
	}
	if !dbName.MatchString(cfg.Database) {
		return nil, fmt.Errorf("open ClickHouse store: database name %q: want letters, digits and _", cfg.Database)
	}
	base, err := url.Parse(cfg.HTTP)
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return nil, fmt.Errorf("open ClickHouse store: HTTP address %q: want http://host:port", redact(cfg.HTTP))
	}
	s := &Store{db: cfg.Database, log: log, now: time.Now, loc: cfg.Location, zone: cfg.RollupZone}
	if s.loc == nil {
		s.loc = time.UTC
	}
	if s.zone == nil {
		s.zone = s.loc
	}
	hc := cfg.Client
	if hc == nil {
		s.own = http.DefaultTransport.(*http.Transport).Clone()
		hc = &http.Client{Transport: s.own}
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = defaultTimeout
	}
	s.c = newClient(hc, base)
	s.c.timeout = cfg.Timeout
	if !cfg.Background {
		if err := s.connect(ctx); err != nil {
			s.Close() //nolint:errcheck // the open error is the one that matters
			return nil, fmt.Errorf("open ClickHouse store at %s, database %q: %w", base.Redacted(), cfg.Database, err)
		}
		return s, nil
	}
	first, cancel := context.WithTimeout(ctx, firstAttempt)
	err = s.connect(first)
	cancel()
	if err != nil {
		log.Warn("ClickHouse does not answer: connecting in the background; until then every call of the store fails",
			"url", base.Redacted(), "database", cfg.Database, "err", err)
		// Not ctx: the attempts outlive Open's caller, until Close.
		cctx, stop := context.WithCancel(context.Background())
		s.stopConnect, s.connectDone = stop, make(chan struct{})
		go s.keepConnecting(cctx, s.connectDone)
	}
	return s, nil
}

func (s *Store) open(ctx context.Context) error {
	out, err := s.c.text(ctx, "", "SELECT version()")
	if err != nil {
		return err
	}
	if s.version, err = ParseVersion(out); err != nil {
		return err
	}
	s.features = FeaturesOf(s.version)
	s.log.Info("ClickHouse connected", "version", s.version.String(), "database", s.db,
		"low_cardinality", s.features.LowCardinality)
	if err := s.c.exec(ctx, "", "CREATE DATABASE IF NOT EXISTS "+quoteIdent(s.db)); err != nil {
		return fmt.Errorf("create database: %w", err)
	}
	if err := s.c.exec(ctx, "", createRequests(s.db, s.features)); err != nil {
		return fmt.Errorf("create table requests: %w", err)
	}
	if err := s.addMissingColumns(ctx); err != nil {
		return err
	}
	for _, ddl := range append(sideTables(s.db), rollupDDL(s.db)...) {
		if err := s.c.exec(ctx, "", ddl); err != nil {
			return fmt.Errorf("create table: %w", err)
		}
	}
	if err := s.addMissingMeasures(ctx); err != nil {
		return err
	}
	return s.openRollups(ctx)
}

// addMissingColumns brings a requests table made by an older tollgate up
// to allColumns: CREATE TABLE IF NOT EXISTS leaves an existing table as
// it was, and a column added since would fail every INSERT. New columns
// get their type's default in old rows. Two replicas starting together
// may both add one; the loser's "already exists" is checked away.
func (s *Store) addMissingColumns(ctx context.Context) error {
	have := map[string]bool{}
	out, err := s.c.text(ctx, "", "SELECT name FROM system.columns WHERE database = "+quoteString(s.db)+" AND table = 'requests'")
	if err != nil {
		return fmt.Errorf("read the columns of table requests: %w", err)
	}
	for name := range strings.SplitSeq(out, "\n") {
		have[name] = true
	}
	for _, c := range allColumns {
		if have[c.name] {
			continue
		}
		typ := c.typ
		if c.dim && s.features.LowCardinality {
			typ = "LowCardinality(" + typ + ")"
		}
		if err := s.c.exec(ctx, "", "ALTER TABLE "+s.table("requests")+" ADD COLUMN "+c.name+" "+typ); err != nil &&
			!strings.Contains(err.Error(), "already exists") {
			return fmt.Errorf("add column %s to table requests: %w", c.name, err)
		}
		s.log.Info("ClickHouse: column added to table requests", "column", c.name)
	}
	return nil
}

// addMissingMeasures brings rollup tables made by an older tollgate up to
// store.Measures, as addMissingColumns does the requests table. Pieces
// written before read 0 for a new measure until they are recomputed.
func (s *Store) addMissingMeasures(ctx context.Context) error {
	tables := []string{rollupHour, rollupMinute, promptHour}
	out, err := s.c.text(ctx, "", "SELECT concat(table, '.', name) FROM system.columns WHERE database = "+quoteString(s.db)+
		" AND table IN ('"+strings.Join(tables, "', '")+"')")
	if err != nil {
		return fmt.Errorf("read the columns of the rollups: %w", err)
	}
	have := map[string]bool{}
	for c := range strings.SplitSeq(out, "\n") {
		have[c] = true
	}
	for _, t := range tables {
		for _, m := range store.Measures {
			if have[t+"."+m.Name] {
				continue
			}
			// Two replicas starting together may both add it: the loser's
			// "already exists" is checked away (old servers lack IF NOT EXISTS).
			if err := s.c.exec(ctx, "", "ALTER TABLE "+s.table(t)+" ADD COLUMN "+m.Name+" Int64"); err != nil &&
				!strings.Contains(err.Error(), "already exists") {
				return fmt.Errorf("add column %s to table %s: %w", m.Name, t, err)
			}
			s.log.Info("ClickHouse: column added to a rollup", "table", t, "column", m.Name)
		}
	}
	return nil
}

// Version is the server's version, read at Open; the zero Version while
// not connected.
func (s *Store) Version() Version {
	if !s.connected.Load() {
		return Version{}
	}
	return s.version
}

// Close stops connecting in the background and releases idle
// connections. It does not flush Writers: cancel their Run and wait for
// it to return first.
func (s *Store) Close() error {
	if s.stopConnect != nil {
		s.stopConnect()
		<-s.connectDone
	}
	if s.own != nil {
		s.own.CloseIdleConnections()
	}
	return nil
}

// Insert writes recs, skipping every Record whose RequestID is already
// stored (or repeated earlier in recs): the first write wins.
//
// How that is exact on a database without unique keys: Insert asks which
// ids of the batch are stored (in the batch's day partitions only — a
// request's id and arrival never change, so a replay lands on the same
// day) and writes the rest in one INSERT, holding a mutex from the check
// to the write. Within one process that is exact. Two replicas racing on
// the same id — which only a replayed spill or a misrouted retry could
// cause — may both write it; ReplacingMergeTree collapses the pair on
// (day, request_id), keeping the first write (see verCol), and every read
// uses FINAL, so readers never see two rows either way.
//
// The look-up reads the request_id column of the batch's whole days (ids
// are random, so the primary index cannot narrow it), which grows with
// the day: at 50,000 records/s a day holds billions. So it is skipped for
// a batch marked store.Batch.FirstDelivery — one the write-ahead queue sends
// for the first time, which no store has seen — and runs for retries and
// replays, where doubles can come from. Without it, a RequestID a client
// reused (X-Request-Id) is written twice and FINAL keeps the first write,
// as above.
//
// An INSERT that spans several days is written as one part per day; if it
// fails half-way, the Writer's retry finds the written days stored and
// writes the others.
func (s *Store) Insert(ctx context.Context, b store.Batch) error {
	recs := b.Records
	if err := s.Connected(); err != nil {
		return err
	}
	if len(recs) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("insert %d records into ClickHouse: %w", len(recs), err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.insert(ctx, recs, b.FirstDelivery); err != nil {
		return fmt.Errorf("insert %d records into ClickHouse: %w", len(recs), err)
	}
	return nil
}

func (s *Store) insert(ctx context.Context, recs []*record.Record, firstDelivery bool) error {
	var stored map[string]bool
	if firstDelivery {
		stored = make(map[string]bool, len(recs))
	} else {
		var err error
		if stored, err = s.storedIDs(ctx, recs); err != nil {
			return fmt.Errorf("check stored ids: %w", err)
		}
	}
	todo := make([]*record.Record, 0, len(recs))
	for _, r := range recs {
		if r == nil || stored[r.RequestID] {
			continue
		}
		stored[r.RequestID] = true // a repeat later in recs is a replay too
		todo = append(todo, r)
	}
	if err := s.insertParts(ctx, todo); err != nil {
		// One half of a split batch may be stored: mark its pieces
		// anyway (marking an unchanged piece only recomputes it), for a
		// caller that does not retry (the ledger's last flush at
		// shutdown) would leave its rows out of the reports.
		return errors.Join(err, s.mark(ctx, recs))
	}
	// After the rows, and for the stored ones too: a retry after a
	// failed mark finds its rows stored and must still mark them.
	return s.mark(ctx, recs)
}

// finished returns r if Finish has run on it (it always sets
// Segments.Source), else a finished copy: the derived columns must agree
// with the marks even if the caller forgot, and the caller's Record is not
// ours to modify. A Record changed after its Finish (store.Store.Insert
// takes them finished) keeps its derived figures. Finishing every row
// again was a tenth of the ledger's CPU on the way to ClickHouse.
func finished(r *record.Record) *record.Record {
	if r.Derived.Segments.Source != nil {
		return r
	}
	f := *r
	f.Finish()
	return &f
}

// splitRows is the fewest rows an INSERT of a split batch carries.
const splitRows = 10000

// insertParts writes recs in one INSERT or, for a large batch, in two
// running at once. The server writes one INSERT's part on one thread, and
// sorting and writing a part is most of its cost per row; two INSERTs are
// two threads, so a batch of 50,000 is stored in about half the time and
// a replica's ledger keeps up with twice the rate (BenchmarkLedgerClickHouse).
// Both halves are still large (≥ splitRows), as ClickHouse asks. If one
// fails, Insert fails and the caller's retry — a redelivery, so looked up —
// writes only what is missing.
func (s *Store) insertParts(ctx context.Context, recs []*record.Record) error {
	if len(recs) == 0 {
		return nil
	}
	ver := math.MaxUint64 - uint64(s.now().UnixNano())
	q := fmt.Sprintf("INSERT INTO %s.requests (%s) FORMAT RowBinary", quoteIdent(s.db), insertColumns)
	write := func(part []*record.Record) error {
		return s.c.insertRows(ctx, q, len(part), func(e *enc, i int) {
			encodeRow(e, finished(part[i]), ver)
		})
	}
	if len(recs) < 2*splitRows {
		return write(recs)
	}
	half := len(recs) / 2
	errc := make(chan error, 1)
	go func() { errc <- write(recs[half:]) }()
	return errors.Join(write(recs[:half]), <-errc)
}

// storedIDs returns which RequestIDs of recs are in the table already.
//
// The ids travel as an external table (RowBinary in a multipart body), not
// as a literal IN list: ClickHouse parsed 1000 quoted literals into a
// syntax tree on every batch, which cost it about three times as much as
// reading the ids as data (BenchmarkIngest), and a list had to be split to
// fit max_query_size.
func (s *Store) storedIDs(ctx context.Context, recs []*record.Record) (map[string]bool, error) {
	days := map[uint16]bool{}
	ids := &enc{b: make([]byte, 0, len(recs)*40)}
	seen := make(map[string]bool, len(recs))
	for _, r := range recs {
		if r == nil || seen[r.RequestID] {
			continue
		}
		seen[r.RequestID] = true
		ids.str(r.RequestID)
		days[day(r.Arrival)] = true
	}
	dayList := make([]string, 0, len(days))
	for _, d := range slices.Sorted(mapKeys(days)) {
		dayList = append(dayList, quoteDay(d))
	}
	stored := make(map[string]bool, len(seen))
	if len(seen) == 0 {
		return stored, nil
	}
	q := fmt.Sprintf("SELECT DISTINCT request_id FROM %s.requests WHERE day IN (%s) AND request_id IN (SELECT id FROM ids) FORMAT RowBinary",
		quoteIdent(s.db), strings.Join(dayList, ", "))
	err := s.c.queryWith(ctx, q, external{name: "ids", structure: "id String", rows: ids.b}, func(d *dec) error {
		for d.more() {
			id := d.str()
			if d.err == nil {
				stored[id] = true
			}
		}
		return d.err
	})
	if err != nil {
		return nil, err
	}
	return stored, nil
}

func mapKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// Requests returns the ledger rows matching f, newest first. Timeline is
// never read here (use Request for details).
func (s *Store) Requests(ctx context.Context, f store.Filter) ([]*record.Record, error) {
	if err := s.Connected(); err != nil {
		return nil, err
	}
	if _, err := f.SortColumn(); err != nil {
		return nil, err
	}
	recs, err := s.read(ctx, requestsQuery(s.db, f), false)
	if err != nil {
		return nil, fmt.Errorf("query ClickHouse ledger: %w", err)
	}
	return recs, nil
}

func requestsQuery(db string, f store.Filter) string {
	var where []string
	add := func(format string, args ...any) { where = append(where, fmt.Sprintf(format, args...)) }
	if !f.Since.IsZero() {
		// The day bound lets ClickHouse skip whole partitions; arrival_ns
		// is the exact bound.
		add("day >= %s AND arrival_ns >= %s", quoteDay(day(f.Since)), quoteInt(f.Since.UnixNano()))
	}
	if !f.Until.IsZero() {
		// A Record without arrival has none before Until, as in SQLite.
		add("day <= %s AND arrival_ns < %s AND arrival_ns != %s", quoteDay(day(f.Until)), quoteInt(f.Until.UnixNano()), quoteInt(noArrival))
	}
	for _, c := range []struct{ col, val string }{
		{"user_id", f.UserID}, {"biz_line", f.BizLine}, {"model", f.Model},
		{"trace_id", f.TraceID}, {"template_id", f.TemplateID}, {"client_request_id", f.ClientRequestID},
		{"endpoint", f.Endpoint}, {"end_user", f.EndUser},
	} {
		if c.val != "" {
			add("%s = %s", c.col, quoteString(c.val))
		}
	}
	if f.Status != 0 {
		add("status = %s", quoteInt(int64(f.Status)))
	}
	if f.ErrorsOnly {
		add("error_type != ''")
	}
	if f.MinE2E > 0 {
		add("e2e_ns >= %s", quoteInt(int64(f.MinE2E)))
	}
	limit := f.Limit
	if limit <= 0 {
		limit = defaultLimit
	}
	q := fmt.Sprintf("SELECT %s FROM %s.requests FINAL", selectColumns, quoteIdent(db))
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	// request_id breaks ties between equal arrivals so that pages are
	// stable.
	order := "arrival_ns DESC, request_id DESC"
	if c, _ := f.SortColumn(); c != "" {
		order = c + " DESC NULLS LAST, " + order
	}
	return q + " ORDER BY " + order + " LIMIT " + quoteInt(int64(limit)) + " FORMAT RowBinary"
}

// Request returns every attempt of one request, ordered by attempt, with
// the timeline of the sampled ones. id is a RequestID (of any attempt) or
// a LogicalRequestID.
func (s *Store) Request(ctx context.Context, id string) ([]*record.Record, error) {
	if err := s.Connected(); err != nil {
		return nil, err
	}
	if id == "" {
		return nil, fmt.Errorf("%w: empty id", store.ErrNotFound)
	}
	t := quoteIdent(s.db) + ".requests"
	qid := quoteString(id)
	// The sub-select finds the logical request of an attempt's own id;
	// records without a logical id never match one another.
	q := fmt.Sprintf(`SELECT %s, timeline FROM %s FINAL
		WHERE request_id = %s OR logical_request_id = %s
		   OR (logical_request_id != '' AND logical_request_id IN
		       (SELECT logical_request_id FROM %s FINAL WHERE request_id = %s))
		ORDER BY attempt, request_id FORMAT RowBinary`, selectColumns, t, qid, qid, t, qid)
	recs, err := s.read(ctx, q, true)
	if err != nil {
		return nil, fmt.Errorf("read request %q from ClickHouse: %w", id, err)
	}
	if len(recs) == 0 {
		return nil, fmt.Errorf("%w: %q", store.ErrNotFound, id)
	}
	return recs, nil
}

// read runs a SELECT of selectColumns (then the timeline when
// withTimeline) and decodes the records.
func (s *Store) read(ctx context.Context, q string, withTimeline bool) ([]*record.Record, error) {
	var recs []*record.Record
	err := s.c.query(ctx, q, func(d *dec) error {
		for d.more() {
			r, err := decodeRow(d, withTimeline)
			if err != nil {
				return err
			}
			r.Finish()
			recs = append(recs, r)
		}
		return d.err
	})
	return recs, err
}

// client is the HTTP interface: queries in the body, settings in the URL,
// RowBinary both ways.
type client struct {
	hc      *http.Client
	base    *url.URL
	timeout time.Duration // per call; 0 means none
}

func newClient(hc *http.Client, base *url.URL) *client {
	return &client{hc: hc, base: base}
}

// maxErrorBody bounds how much of an error response is kept.
const maxErrorBody = 4 << 10

// do posts body with the given URL parameters and hands a 200 response's
// body to read. wait_end_of_query makes the server buffer the result, so
// an error during the query is an HTTP error, never a 200 cut short.
func (c *client) do(ctx context.Context, params url.Values, body io.Reader, read func(io.Reader) error) error {
	return c.post(ctx, params, body, "", read)
}

// post is do with a Content-Type ("" for none).
func (c *client) post(ctx context.Context, params url.Values, body io.Reader, contentType string, read func(io.Reader) error) error {
	if c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	u := *c.base
	u.User = nil
	q := u.Query()
	for k, v := range params {
		q[k] = v
	}
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), body)
	if err != nil {
		return err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if c.base.User != nil {
		pw, _ := c.base.User.Password()
		req.SetBasicAuth(c.base.User.Username(), pw)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		return &ServerError{Status: resp.StatusCode, Message: strings.TrimSpace(string(msg))}
	}
	if read == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}
	return read(resp.Body)
}

// exec runs a statement with no result. db, if set, is the default
// database.
func (c *client) exec(ctx context.Context, db, q string) error {
	return c.do(ctx, dbParam(db), strings.NewReader(q), nil)
}

// text runs q and returns its whole output as text.
func (c *client) text(ctx context.Context, db, q string) (string, error) {
	var out string
	err := c.do(ctx, dbParam(db), strings.NewReader(q), func(r io.Reader) error {
		b, err := io.ReadAll(io.LimitReader(r, 1<<20))
		out = strings.TrimSpace(string(b))
		return err
	})
	return out, err
}

// query runs q (which ends in FORMAT RowBinary) and hands the rows to read.
func (c *client) query(ctx context.Context, q string, read func(*dec) error) error {
	return c.do(ctx, url.Values{"wait_end_of_query": {"1"}}, strings.NewReader(q), func(r io.Reader) error {
		return read(newDec(r))
	})
}

// external is a table sent with a query (ClickHouse's "external data"):
// rows in RowBinary, of the given structure ("id String").
type external struct {
	name, structure string
	rows            []byte
}

// queryWith runs q (which ends in FORMAT RowBinary) with the external
// table t and hands the rows to read. The query goes in the URL, the
// table in a multipart body.
func (c *client) queryWith(ctx context.Context, q string, t external, read func(*dec) error) error {
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	part, err := mw.CreateFormFile(t.name, t.name)
	if err != nil {
		return err
	}
	if _, err := part.Write(t.rows); err != nil {
		return err
	}
	if err := mw.Close(); err != nil {
		return err
	}
	params := url.Values{"query": {q}, "wait_end_of_query": {"1"},
		t.name + "_structure": {t.structure}, t.name + "_format": {"RowBinary"}}
	return c.post(ctx, params, &body, mw.FormDataContentType(), func(r io.Reader) error {
		return read(newDec(r))
	})
}

// insert runs the INSERT q with data as its RowBinary rows. The statement
// goes in the URL so that the body is the data alone.
func (c *client) insert(ctx context.Context, q string, data []byte) error {
	return c.do(ctx, url.Values{"query": {q}}, bytes.NewReader(data), nil)
}

// insertChunk is how much of an INSERT's body is encoded before it is
// handed to the connection.
const insertChunk = 256 << 10

// insertRows runs the INSERT q (… FORMAT RowBinary) with n rows that row
// appends, streaming the body as it is encoded: the server parses the
// first rows while the last are encoded, and a batch of 100,000 rows is
// never a 100 MB buffer.
func (c *client) insertRows(ctx context.Context, q string, n int, row func(e *enc, i int)) error {
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		e := &enc{b: make([]byte, 0, insertChunk+insertChunk/2)}
		for i := range n {
			row(e, i)
			if len(e.b) >= insertChunk {
				if _, err := pw.Write(e.b); err != nil {
					return // the request ended early; its error is do's
				}
				e.b = e.b[:0]
			}
		}
		if _, err := pw.Write(e.b); err == nil {
			pw.Close()
		}
	}()
	err := c.do(ctx, url.Values{"query": {q}}, pr, nil)
	// Unblocks the encoder if the request ended before reading it all.
	pr.CloseWithError(errInsertEnded)
	<-done
	return err
}

var errInsertEnded = errors.New("clickhouse: insert ended")

func dbParam(db string) url.Values {
	if db == "" {
		return nil
	}
	return url.Values{"database": {db}}
}

// ServerError is an error answered by the server: ClickHouse's own
// message ("Code: 60, e.displayText() = DB::Exception: Table ... doesn't
// exist") with the HTTP status.
type ServerError struct {
	Status  int
	Message string
}

func (e *ServerError) Error() string {
	return fmt.Sprintf("ClickHouse answered %d: %s", e.Status, e.Message)
}

// redact hides a password in an address that did not parse.
func redact(addr string) string {
	if u, err := url.Parse(addr); err == nil {
		return u.Redacted()
	}
	if i := strings.LastIndex(addr, "@"); i >= 0 {
		return "…@" + addr[i+1:]
	}
	return addr
}
