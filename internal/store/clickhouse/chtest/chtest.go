// Package chtest gives tests outside the clickhouse package a real
// ClickHouse server, found the way that package's own tests find one:
//
//   - TOLLGATE_CLICKHOUSE_HTTP (e.g. http://127.0.0.1:8123) names one to use;
//   - otherwise Server starts Debian's clickhouse-server on loopback ports
//     in a scratch directory, stopped when the test ends;
//   - with neither, the test is skipped, saying why.
//
// It depends on net/http only (not on package clickhouse), so that
// package's tests could use it too.
package chtest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

var dbSeq atomic.Int64

// Database returns a database name of its own for a test, on a server the
// test shares; the store creates it. Drop it with Exec when done.
func Database() string {
	return fmt.Sprintf("tollgate_test_%d_%d", os.Getpid(), dbSeq.Add(1))
}

// Start finds a server named by TOLLGATE_CLICKHOUSE_HTTP or starts one
// (for a whole test binary: call it from TestMain) and returns its base
// URL and how to stop it; with neither, url is "" and why says what is
// missing.
func Start() (url string, stop func() error, why string, err error) {
	nothing := func() error { return nil }
	if u := os.Getenv("TOLLGATE_CLICKHOUSE_HTTP"); u != "" {
		return u, nothing, "", nil
	}
	if os.Getenv("TOLLGATE_CLICKHOUSE_ADDR") != "" {
		return "", nothing, "TOLLGATE_CLICKHOUSE_ADDR is set but TOLLGATE_CLICKHOUSE_HTTP is not: the ClickHouse store speaks the HTTP interface; set TOLLGATE_CLICKHOUSE_HTTP too", nil
	}
	bin := findServer()
	if bin == "" {
		return "", nothing, "no ClickHouse server: set TOLLGATE_CLICKHOUSE_HTTP, or install Debian's clickhouse-server (scripts/test.sh does)", nil
	}
	u, stop, err := launch(bin)
	return u, stop, "", err
}

// Server returns the base URL of a ClickHouse HTTP interface for t,
// starting a server (stopped at t's cleanup) when none is named, and
// skips t when there is neither.
func Server(t testing.TB) string {
	t.Helper()
	u, stop, why, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	if u == "" {
		t.Skip(why)
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("stop clickhouse-server: %v", err)
		}
	})
	return u
}

// Exec runs one statement on the server at base (a test's DROP DATABASE,
// say) and returns its output as text.
func Exec(ctx context.Context, base, q string) (string, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base, strings.NewReader(q))
	if err != nil {
		return "", err
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("clickhouse: %s: %s", resp.Status, bytes.TrimSpace(b))
	}
	return strings.TrimSpace(string(b)), nil
}

func findServer() string {
	if p, err := exec.LookPath("clickhouse-server"); err == nil {
		return p
	}
	// Debian puts it in /usr/sbin, which a non-root PATH often lacks.
	if fi, err := os.Stat("/usr/sbin/clickhouse-server"); err == nil && !fi.IsDir() {
		return "/usr/sbin/clickhouse-server"
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
// waits until it answers SELECT 1; stop ends it and removes the directory.
func launch(bin string) (base string, stop func() error, err error) {
	dir, err := os.MkdirTemp("", "tollgate-clickhouse-")
	if err != nil {
		return "", nil, err
	}
	p, err := newProc(bin, dir)
	if err == nil {
		err = p.Start()
	}
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	return p.URL, func() error {
		defer os.RemoveAll(dir)
		return p.Stop()
	}, nil
}

// waitReady polls SELECT 1 until it answers, the server exits, or a
// minute passes (a cold start on a loaded 2-core machine takes seconds).
func waitReady(base string, exited <-chan error) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		attempt, cancelAttempt := context.WithTimeout(ctx, 2*time.Second)
		out, err := Exec(attempt, base, "SELECT 1")
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

// FreePort is a TCP port free on loopback now.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
