package clickhouse

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
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
	needServer(t)
	db := fmt.Sprintf("tollgate_test_%d_%d", os.Getpid(), dbSeq.Add(1))
	s, err := Open(t.Context(), Config{HTTP: serverURL, Database: db}, testLogger(t))
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

// startServer finds or starts the server and returns how to stop it.
func startServer() (stop func() error, err error) {
	nothing := func() error { return nil }
	if u := os.Getenv("TOLLGATE_CLICKHOUSE_HTTP"); u != "" {
		serverURL = u
		return nothing, nil
	}
	if os.Getenv("TOLLGATE_CLICKHOUSE_ADDR") != "" {
		noServer = "TOLLGATE_CLICKHOUSE_ADDR is set but TOLLGATE_CLICKHOUSE_HTTP is not: the ClickHouse store speaks the HTTP interface; set TOLLGATE_CLICKHOUSE_HTTP too"
		return nothing, nil
	}
	bin := findServer()
	if bin == "" {
		noServer = "no ClickHouse server: set TOLLGATE_CLICKHOUSE_HTTP, or install Debian's clickhouse-server (scripts/test.sh does)"
		return nothing, nil
	}
	return launch(bin)
}

func findServer() string {
	if p, err := exec.LookPath("clickhouse-server"); err == nil {
		return p
	}
	// Debian puts it in /usr/sbin, which a non-root PATH often lacks.
	for _, p := range []string{"/usr/sbin/clickhouse-server", "/usr/bin/clickhouse"} {
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			if strings.HasSuffix(p, "/clickhouse") {
				continue // the multi-call binary needs "server" first; not handled
			}
			return p
		}
	}
	return ""
}

const configXML = `<?xml version="1.0"?>
<yandex>
  <logger>
    <level>information</level>
    <log>{{dir}}/server.log</log>
    <errorlog>{{dir}}/server.err.log</errorlog>
    <console>0</console>
  </logger>
  <listen_host>127.0.0.1</listen_host>
  <http_port>{{http}}</http_port>
  <tcp_port>{{tcp}}</tcp_port>
  <path>{{dir}}/data/</path>
  <tmp_path>{{dir}}/tmp/</tmp_path>
  <user_files_path>{{dir}}/user_files/</user_files_path>
  <format_schema_path>{{dir}}/format_schemas/</format_schema_path>
  <users_config>{{dir}}/users.xml</users_config>
  <default_profile>default</default_profile>
  <default_database>default</default_database>
  <mark_cache_size>67108864</mark_cache_size>
  <max_concurrent_queries>64</max_concurrent_queries>
</yandex>
`

const usersXML = `<?xml version="1.0"?>
<yandex>
  <profiles><default></default></profiles>
  <users>
    <default>
      <password></password>
      <networks><ip>127.0.0.1</ip><ip>::1</ip></networks>
      <profile>default</profile>
      <quota>default</quota>
    </default>
  </users>
  <quotas><default></default></quotas>
</yandex>
`

// launch starts bin on free loopback ports in a scratch directory and
// waits until it answers SELECT 1 over HTTP.
func launch(bin string) (func() error, error) {
	dir, err := os.MkdirTemp("", "tollgate-clickhouse-")
	if err != nil {
		return nil, err
	}
	httpPort, err1 := freePort()
	tcpPort, err2 := freePort()
	if err := errors.Join(err1, err2); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	cfg := strings.NewReplacer("{{dir}}", dir, "{{http}}", fmt.Sprint(httpPort), "{{tcp}}", fmt.Sprint(tcpPort)).Replace(configXML)
	for name, text := range map[string]string{"config.xml": cfg, "users.xml": usersXML} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	var out bytes.Buffer
	cmd := exec.Command(bin, "--config-file="+filepath.Join(dir, "config.xml"))
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop := func() error {
		if os.Getenv("TOLLGATE_CLICKHOUSE_KEEP") != "" {
			fmt.Fprintln(os.Stderr, "clickhouse tests: server directory kept:", dir)
		} else {
			defer os.RemoveAll(dir)
		}
		select {
		case err := <-exited:
			return fmt.Errorf("server had exited: %v", err)
		default:
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
			return nil
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			return errors.New("server ignored SIGTERM for 30s; killed")
		}
	}
	serverURL = fmt.Sprintf("http://127.0.0.1:%d", httpPort)
	if err := waitReady(exited); err != nil {
		logTail, _ := os.ReadFile(filepath.Join(dir, "server.err.log"))
		_ = stop()
		serverURL = ""
		return nil, fmt.Errorf("clickhouse-server did not come up: %w\noutput: %s\nerror log: %s", err, out.String(), tail(logTail, 2000))
	}
	return stop, nil
}

// waitReady polls SELECT 1 until it answers, the server exits, or a
// minute passes (a cold start on a loaded 2-core machine takes seconds).
func waitReady(exited <-chan error) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		attempt, cancelAttempt := context.WithTimeout(ctx, 2*time.Second)
		out, err := adminQuery(attempt, "SELECT 1")
		cancelAttempt()
		if err == nil && out == "1" {
			return nil
		}
		last = err
		select {
		case err := <-exited:
			return fmt.Errorf("server exited: %v", err)
		case <-ctx.Done():
			return fmt.Errorf("no answer within a minute; last: %v", last)
		case <-tick.C:
		}
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
