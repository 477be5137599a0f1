package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	msqlite "modernc.org/sqlite"

	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/store"
	"github.com/tollgate-dev/tollgate/internal/store/sqlite"
)

// BuildOptions says how Build writes the ledger. The zero value is the
// production path exactly: one Store, batches of 512, SQLite's defaults.
type BuildOptions struct {
	// Batch is the Records per Store.Insert (one transaction each). The
	// gateway's Writer uses at most 512; default 512.
	Batch int
	// DeferIndexes drops the ledger's secondary indexes before loading and
	// creates them again, from their own stored DDL, once every row is in.
	// The rows, the rollups and the index contents end up the same (the
	// rollups are still written by Store.Insert in the insert transaction);
	// only the index B-trees are laid out by one sort instead of millions
	// of random inserts.
	DeferIndexes bool
	// CacheMiB, if > 0, gives every SQLite connection opened during the
	// build (the store's writer included) a page cache of that size instead
	// of SQLite's default 2 MiB. The cache decides how often a page is read
	// and written, never what it holds.
	CacheMiB int
	// Shards > 1 builds the period as that many day ranges, each into its
	// own file through its own Store.Insert, Workers at a time, then copies
	// them into path in arrival order. Shards end at local midnights, so no
	// rollup row spans two of them and the copy is a plain union (a key in
	// two shards would fail it). It exists to use both cores: one
	// Store.Insert stream is single-threaded by design.
	Shards, Workers int
	// Progress, if set, is called after every Insert with the rows so far.
	Progress func(rows int, elapsed time.Duration)
}

// BuildStats says how a ledger was built.
type BuildStats struct {
	Rows    int
	Sampled int           // rows that kept a timeline
	Insert  time.Duration // wall time of the Store.Insert phase
	Copy    time.Duration // concatenating shards
	Index   time.Duration // re-creating deferred indexes
	Total   time.Duration
}

// Build writes the ledger cfg describes into a new SQLite file at path
// through sqlite.Store.Insert.
func Build(ctx context.Context, path string, cfg Config, opt BuildOptions) (BuildStats, error) {
	if opt.Batch <= 0 {
		opt.Batch = 512
	}
	cfg = cfg.withDefaults()
	start := time.Now()
	var st BuildStats
	if opt.CacheMiB > 0 {
		q := fmt.Sprintf("PRAGMA cache_size = -%d", opt.CacheMiB*1024)
		hookPragma.Store(&q)
		defer hookPragma.Store(nil)
	}
	ddl, err := create(ctx, path, opt.DeferIndexes)
	if err != nil {
		return st, err
	}

	var (
		mu   sync.Mutex
		rows int
	)
	progress := func(n int) {
		mu.Lock()
		defer mu.Unlock()
		rows += n
		if opt.Progress != nil {
			opt.Progress(rows, time.Since(start))
		}
	}
	if opt.Shards <= 1 {
		st.Rows, st.Sampled, err = insertAll(ctx, path, cfg, opt.Batch, progress)
		if err != nil {
			return st, err
		}
		st.Insert = time.Since(start)
	} else {
		shards, err := buildShards(ctx, path, cfg, opt, progress, &st)
		defer func() {
			for _, s := range shards {
				removeDB(s)
			}
		}()
		if err != nil {
			return st, err
		}
		st.Insert = time.Since(start)
		t0 := time.Now()
		if err := concat(ctx, path, shards); err != nil {
			return st, err
		}
		st.Copy = time.Since(t0)
	}
	if len(ddl) > 0 {
		t0 := time.Now()
		if err := execAll(ctx, path, ddl); err != nil {
			return st, err
		}
		st.Index = time.Since(t0)
	}
	// Open and close once more so that Close's PRAGMA optimize sees the
	// finished ledger, as it would after a build row by row.
	s, err := sqlite.Open(ctx, path, nil, sqlite.WithLocation(Loc))
	if err != nil {
		return st, err
	}
	if err := s.Close(); err != nil {
		return st, err
	}
	st.Total = time.Since(start)
	return st, nil
}

// create makes an empty ledger at path with the real Open (so the schema is
// the store's own migrations) and, if asked, drops the secondary indexes of
// the requests table, returning their DDL. The primary key's index stays:
// Insert's ON CONFLICT needs it.
func create(ctx context.Context, path string, dropIndexes bool) ([]string, error) {
	s, err := sqlite.Open(ctx, path, nil, sqlite.WithLocation(Loc))
	if err != nil {
		return nil, err
	}
	if err := s.Close(); err != nil {
		return nil, err
	}
	if !dropIndexes {
		return nil, nil
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, `SELECT name, sql FROM sqlite_master
		WHERE type = 'index' AND tbl_name = 'requests' AND sql IS NOT NULL ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list ledger indexes: %w", err)
	}
	var names, ddl []string
	for rows.Next() {
		var n, q string
		if err := rows.Scan(&n, &q); err != nil {
			rows.Close()
			return nil, err
		}
		names, ddl = append(names, n), append(ddl, q)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for _, n := range names {
		if _, err := db.ExecContext(ctx, `DROP INDEX "`+n+`"`); err != nil {
			return nil, fmt.Errorf("drop index %s: %w", n, err)
		}
	}
	return ddl, nil
}

// insertAll writes every Record of cfg into the ledger at path through one
// Store, batch Records per Insert. Generation runs on its own goroutine so
// that the insert path, which is what is measured, has a core to itself.
func insertAll(ctx context.Context, path string, cfg Config, batch int, progress func(int)) (rows, sampled int, err error) {
	s, err := sqlite.Open(ctx, path, nil, sqlite.WithLocation(Loc))
	if err != nil {
		return 0, 0, err
	}
	// Three arenas: one being generated, one queued, one being inserted.
	type arena struct {
		recs []record.Record
		ptrs []*record.Record
		n    int
	}
	free, full := make(chan *arena, 3), make(chan *arena, 3)
	for range 3 {
		a := &arena{recs: make([]record.Record, batch), ptrs: make([]*record.Record, batch)}
		for i := range a.recs {
			a.ptrs[i] = &a.recs[i]
		}
		free <- a
	}
	gctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var gsampled int // the generator's; read once full is closed
	go func() {
		defer close(full)
		g := New(cfg)
		for {
			var a *arena
			select {
			case a = <-free:
			case <-gctx.Done():
				return
			}
			if a.n = g.Next(a.recs); a.n == 0 {
				return
			}
			for i := range a.n {
				if a.recs[i].Sampled {
					gsampled++
				}
			}
			full <- a
		}
	}()
	for a := range full {
		if err == nil {
			err = s.Insert(ctx, store.Batch{Records: a.ptrs[:a.n]})
		}
		if err != nil {
			cancel() // drain what the generator already queued
			continue
		}
		rows += a.n
		progress(a.n)
		free <- a
	}
	if err == nil {
		err = ctx.Err()
	}
	return rows, gsampled, errors.Join(err, s.Close())
}

// buildShards builds the day ranges of cfg into files next to path.
func buildShards(ctx context.Context, path string, cfg Config, opt BuildOptions, progress func(int), st *BuildStats) ([]string, error) {
	n := min(opt.Shards, cfg.ToDay-cfg.FromDay)
	workers := max(opt.Workers, 1)
	shards := make([]string, n)
	errs := make([]error, n)
	counts := make([][2]int, n)
	sem := make(chan struct{}, workers)
	var wg sync.WaitGroup
	span := cfg.ToDay - cfg.FromDay
	for i := range n {
		shards[i] = fmt.Sprintf("%s.shard%02d", path, i)
		c := cfg
		c.FromDay, c.ToDay = cfg.FromDay+span*i/n, cfg.FromDay+span*(i+1)/n
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			removeDB(shards[i])
			if _, err := create(ctx, shards[i], opt.DeferIndexes); err != nil {
				errs[i] = err
				return
			}
			counts[i][0], counts[i][1], errs[i] = insertAll(ctx, shards[i], c, opt.Batch, progress)
		})
	}
	wg.Wait()
	for _, c := range counts {
		st.Rows += c[0]
		st.Sampled += c[1]
	}
	return shards, errors.Join(errs...)
}

// concat copies the shards into dst in order, table by table. Rowid tables
// are copied in rowid order, so the ledger's rowids come out in arrival
// order as a single build gives them.
func concat(ctx context.Context, dst string, shards []string) error {
	db, err := sql.Open("sqlite", dst)
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if _, err := db.ExecContext(ctx, "PRAGMA cache_size = -1048576"); err != nil {
		return err
	}
	var tables []table
	rows, err := db.QueryContext(ctx, `SELECT name, sql FROM sqlite_master WHERE type = 'table'
		AND name NOT LIKE 'sqlite_%' AND name NOT IN ('schema_migrations', 'rollup_state') ORDER BY name`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var n, ddl string
		if err := rows.Scan(&n, &ddl); err != nil {
			rows.Close()
			return err
		}
		tables = append(tables, table{n, !strings.Contains(ddl, "WITHOUT ROWID")})
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, s := range shards {
		if _, err := db.ExecContext(ctx, "ATTACH DATABASE ? AS shard", s); err != nil {
			return fmt.Errorf("attach %s: %w", s, err)
		}
		if err := copyShard(ctx, db, tables); err != nil {
			return fmt.Errorf("copy %s: %w", s, err)
		}
		if _, err := db.ExecContext(ctx, "DETACH DATABASE shard"); err != nil {
			return err
		}
		if _, err := db.ExecContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
			return err
		}
	}
	// Every shard's rows came with their rollups, which were added up.
	_, err = db.ExecContext(ctx, "UPDATE rollup_state SET rolled_through = (SELECT COALESCE(MAX(rowid), 0) FROM requests)")
	return err
}

// table is one table of the ledger file.
type table struct {
	name  string
	rowid bool // a rowid table, as opposed to WITHOUT ROWID
}

func copyShard(ctx context.Context, db *sql.DB, tables []table) error {
	// The same migrations made both files; a difference would make
	// SELECT * copy columns into the wrong places.
	var same bool
	if err := db.QueryRowContext(ctx, `SELECT NOT EXISTS (
		SELECT name, sql FROM main.sqlite_master WHERE type = 'table' EXCEPT SELECT name, sql FROM shard.sqlite_master WHERE type = 'table')`).Scan(&same); err != nil {
		return err
	}
	if !same {
		return errors.New("shard schema differs from the ledger's")
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	for _, t := range tables {
		q := fmt.Sprintf(`INSERT INTO main."%s" SELECT * FROM shard."%s"`, t.name, t.name)
		if t.rowid {
			q += " ORDER BY rowid"
		} else {
			// A rollup: months (and days, if a shard boundary cuts one)
			// span shards, so equal keys add up.
			up, err := mergeClause(ctx, tx, t.name)
			if err != nil {
				return fmt.Errorf("%s: %w", t.name, err)
			}
			q += " WHERE true " + up
		}
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", t.name, err)
		}
	}
	return tx.Commit()
}

// mergeClause is the upsert clause that adds a rollup row to an existing
// one with the same key: every column outside the primary key is a sum.
func mergeClause(ctx context.Context, tx *sql.Tx, name string) (string, error) {
	rows, err := tx.QueryContext(ctx, "SELECT name, pk FROM main.pragma_table_info(?) ORDER BY cid", name)
	if err != nil {
		return "", err
	}
	defer rows.Close()
	var keys, sets []string
	for rows.Next() {
		var col string
		var pk int
		if err := rows.Scan(&col, &pk); err != nil {
			return "", err
		}
		if pk > 0 {
			keys = append(keys, col)
		} else {
			sets = append(sets, fmt.Sprintf("%s = %s + excluded.%s", col, col, col))
		}
	}
	if err := rows.Err(); err != nil {
		return "", err
	}
	return fmt.Sprintf("ON CONFLICT (%s) DO UPDATE SET %s", strings.Join(keys, ", "), strings.Join(sets, ", ")), nil
}

// execAll runs statements on the ledger at path, with a cache big enough for
// CREATE INDEX to sort in memory.
func execAll(ctx context.Context, path string, stmts []string) error {
	db, err := sql.Open("sqlite", path)
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	for _, q := range append([]string{"PRAGMA cache_size = -1048576"}, stmts...) {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	_, err = db.ExecContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)")
	return err
}

func removeDB(path string) {
	for _, suffix := range []string{"", "-wal", "-shm"} {
		os.Remove(path + suffix) //nolint:errcheck // best effort: it may not exist
	}
}

// hookPragma is run on every new connection of the "sqlite" driver while it
// is set: the only way to change the page cache of the store's own writer
// without changing the store. Build sets it for its duration only.
var hookPragma atomic.Pointer[string]

func init() {
	msqlite.RegisterConnectionHook(func(c msqlite.ExecQuerierContext, _ string) error {
		if q := hookPragma.Load(); q != nil {
			_, err := c.ExecContext(context.Background(), *q, nil)
			return err
		}
		return nil
	})
}
