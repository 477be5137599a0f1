package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"

	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/store"
	"github.com/tollgate-dev/tollgate/internal/store/clickhouse"
	"github.com/tollgate-dev/tollgate/internal/store/sqlite"
)

// ledgerStore is what serve needs of a store: the ledger and its
// analytics. Everything downstream takes these interfaces.
type ledgerStore interface {
	store.Store
	store.Analytics
}

// openStore opens the store that store.backend names.
func openStore(ctx context.Context, cfg *config.Config, log *slog.Logger) (ledgerStore, error) {
	switch cfg.Store.Backend {
	case "clickhouse":
		ch := cfg.Store.ClickHouse
		st, err := clickhouse.Open(ctx, clickhouse.Config{HTTP: ch.URL, Database: ch.Database, Timeout: ch.Timeout, Location: cfg.Location()}, log)
		if err != nil {
			return nil, err
		}
		v := st.Version()
		log.Info("store: ClickHouse", "url", redactedURL(ch.URL), "database", ch.Database, "server_version", v.String(),
			"batch_size", cfg.Store.BatchSize, "flush_interval", cfg.Store.FlushInterval, "queue", cfg.QueueDir())
		log.Warn("ClickHouse store: reports aggregate the ledger rows themselves (no rollups yet), so a long report reads every row of its period")
		return st, nil
	case "", "sqlite":
		st, err := sqlite.Open(ctx, cfg.Store.SQLite.Path, log, sqlite.WithLocation(cfg.Location()))
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
