package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"time"

	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/store"
	"github.com/tollgate-dev/tollgate/internal/store/clickhouse"
	"github.com/tollgate-dev/tollgate/internal/store/sqlite"
)

// openStore opens the store that store.backend names, with store.timezone
// as its report time zone. A ClickHouse server that does not answer fails
// it: what a command that reads the ledger wants.
func openStore(ctx context.Context, cfg *config.Config, log *slog.Logger) (store.Backend, error) {
	return openStoreIn(ctx, cfg, cfg.Location(), false, log)
}

// openServeStore is openStore for serve: a ClickHouse server that does not
// answer does not stop serve from starting. The store connects in the
// background (its calls fail with store.ErrNotConnected until then) and
// the write-ahead queue keeps the Records meanwhile.
func openServeStore(ctx context.Context, cfg *config.Config, log *slog.Logger) (store.Backend, error) {
	return openStoreIn(ctx, cfg, cfg.Location(), true, log)
}

// storeConnected is nil when st is connected: always for a store that
// connects at open (SQLite).
func storeConnected(st store.Store) error {
	if c, ok := st.(store.Connector); ok {
		return c.Connected()
	}
	return nil
}

// openStoreIn is openStore with loc as the report time zone (a CLI --tz),
// and with background, ClickHouse connecting in the background when its
// server does not answer. ClickHouse's rollup zone stays store.timezone
// whatever loc is: the rollups are shared by the fleet, and a one-off
// report on an empty database must not fix the zone they are cut in.
func openStoreIn(ctx context.Context, cfg *config.Config, loc *time.Location, background bool, log *slog.Logger) (store.Backend, error) {
	switch cfg.Store.Backend {
	case "clickhouse":
		ch := cfg.Store.ClickHouse
		st, err := clickhouse.Open(ctx, clickhouse.Config{HTTP: ch.URL, Database: ch.Database, Timeout: ch.Timeout,
			Location: loc, RollupZone: cfg.Location(), Background: background}, log)
		if err != nil {
			return nil, err
		}
		v := "not connected yet" // Open has logged why
		if st.Connected() == nil {
			v = st.Version().String()
		}
		log.Info("store: ClickHouse; reports read its hourly rollups", "url", redactedURL(ch.URL), "database", ch.Database, "server_version", v,
			"batch_size", cfg.Store.BatchSize, "flush_interval", cfg.Store.FlushInterval, "queue", cfg.QueueDir())
		return st, nil
	case "", "sqlite":
		st, err := sqlite.Open(ctx, cfg.Store.SQLite.Path, log, sqlite.WithLocation(loc))
		if err != nil {
			return nil, err // not a typed nil in the interface
		}
		return st, nil
	default:
		return nil, fmt.Errorf("store.backend: must be sqlite or clickhouse; got %q", cfg.Store.Backend)
	}
}

// redactedURL drops the password from a URL for the log.
func redactedURL(s string) string {
	if u, err := url.Parse(s); err == nil {
		return u.Redacted()
	}
	return "[unparsable]"
}

// ledgerFlags are the flags of the commands that read (or fill) a ledger:
// the SQLite file --db, or the store a config file names with --config, so
// that on a fleet writing to ClickHouse any machine's CLI reads the whole
// fleet's ledger.
type ledgerFlags struct {
	db, config string
	fs         *flag.FlagSet
	// loc is the report time zone of the store open opened.
	loc *time.Location
}

func addLedgerFlags(fs *flag.FlagSet, dbHelp string) *ledgerFlags {
	l := &ledgerFlags{fs: fs}
	fs.StringVar(&l.db, "db", "./tollgate.db", dbHelp)
	fs.StringVar(&l.config, "config", "", "config `file`: use the store its store section names (sqlite or clickhouse) instead of --db")
	return l
}

// set reports whether the flag name was given on the command line.
func (l *ledgerFlags) set(name string) bool {
	found := false
	l.fs.Visit(func(f *flag.Flag) { found = found || f.Name == name })
	return found
}

// open opens the ledger. An existing SQLite file is required unless create
// is set: a mistyped path must not read as an empty ledger. A non-nil loc
// overrides the report time zone (store.timezone with --config, else UTC).
func (l *ledgerFlags) open(ctx context.Context, loc *time.Location, create bool) (store.Backend, error) {
	quiet := slog.New(slog.DiscardHandler)
	if l.config == "" {
		if loc == nil {
			loc = time.UTC
		}
		l.loc = loc
		return openSQLite(ctx, l.db, loc, create, "pass --db PATH or --config FILE")
	}
	cfg, err := config.Load(l.config)
	if err != nil {
		return nil, err
	}
	if loc == nil {
		loc = cfg.Location()
	}
	l.loc = loc
	switch cfg.Store.Backend {
	case "", "sqlite":
		if l.set("db") {
			cfg.Store.SQLite.Path = l.db
		}
		return openSQLite(ctx, cfg.Store.SQLite.Path, loc, create, "store.sqlite.path of "+l.config)
	}
	if l.set("db") {
		return nil, fmt.Errorf("--db names a SQLite ledger, but %s uses store.backend %s: give one of --db and --config", l.config, cfg.Store.Backend)
	}
	// loc is the report zone only: store.timezone stays the rollup zone.
	return openStoreIn(ctx, cfg, loc, false, quiet)
}

func openSQLite(ctx context.Context, path string, loc *time.Location, create bool, hint string) (store.Backend, error) {
	if !create {
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("no ledger at %s (start \"tollgate serve\" or \"tollgate demo\" first, or %s)", path, hint)
		}
	}
	st, err := sqlite.Open(ctx, path, slog.New(slog.DiscardHandler), sqlite.WithLocation(loc))
	if err != nil {
		return nil, err // not a typed nil in the interface
	}
	return st, nil
}
