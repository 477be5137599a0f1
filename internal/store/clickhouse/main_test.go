package clickhouse

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tollgate-dev/tollgate/internal/store/clickhouse/chtest"
)

// The tests run against a real ClickHouse server, never a fake:
//
//   - TOLLGATE_CLICKHOUSE_HTTP (e.g. http://127.0.0.1:8123) names one to
//     use; TOLLGATE_CLICKHOUSE_ADDR, the native protocol's host:port, is
//     accepted alongside it but not needed, as the store speaks HTTP;
//   - otherwise TestMain starts clickhouse-server (Debian's package) on
//     loopback with a scratch directory, once for the whole binary;
//   - with neither, the tests that need a server skip, saying why.
//
// Each test gets its own database, so tests never see each other's rows.

var (
	// serverURL is the HTTP interface the tests use; "" when none.
	serverURL string
	// noServer says why there is none.
	noServer string
	dbSeq    atomic.Int64
)

func TestMain(m *testing.M) {
	stop, err := startServer()
	if err != nil {
		fmt.Fprintln(os.Stderr, "clickhouse tests:", err)
		os.Exit(1)
	}
	code := m.Run()
	if err := stop(); err != nil {
		fmt.Fprintln(os.Stderr, "clickhouse tests: stop server:", err)
		code = 1
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "clickhouse tests: leaked goroutines:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// needServer skips t when no server is available.
func needServer(t testing.TB) {
	t.Helper()
	if serverURL == "" {
		t.Skip(noServer)
	}
}

// openTest opens a Store on a new database of the test server, dropped
// when t ends.
func openTest(t testing.TB) *Store {
	t.Helper()
	return openTestIn(t, nil)
}

// openTestIn is openTest with loc as the report time zone (nil: UTC).
func openTestIn(t testing.TB, loc *time.Location) *Store {
	t.Helper()
	needServer(t)
	db := fmt.Sprintf("tollgate_test_%d_%d", os.Getpid(), dbSeq.Add(1))
	s, err := Open(t.Context(), Config{HTTP: serverURL, Database: db, Location: loc}, testLogger(t))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		// After the store's own Close, which the suite registers later
		// and so runs first.
		if err := adminExec(context.Background(), "DROP DATABASE IF EXISTS "+quoteIdent(db)); err != nil {
			t.Errorf("drop test database %s: %v", db, err)
		}
	})
	return s
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// adminExec runs one statement on the test server with a client of its
// own, closed after.
func adminExec(ctx context.Context, q string) error {
	_, err := adminQuery(ctx, q)
	return err
}

// adminQuery runs q on the test server and returns its output as text.
func adminQuery(ctx context.Context, q string) (string, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	defer tr.CloseIdleConnections()
	u, err := url.Parse(serverURL)
	if err != nil {
		return "", err
	}
	return newClient(&http.Client{Transport: tr}, u).text(ctx, "", q)
}

// startServer finds or starts the server (chtest.Start) and returns how
// to stop it.
func startServer() (stop func() error, err error) {
	serverURL, stop, noServer, err = chtest.Start()
	return stop, err
}
