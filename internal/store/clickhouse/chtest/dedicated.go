package chtest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Proc is a ClickHouse server of one test's own, which the test may stop
// and start again — an outage of the real server rather than of a hop in
// front of it. Its data directory and ports outlive a Stop, so what was
// written before is there after Start.
type Proc struct {
	URL string // base URL of the HTTP interface; the same after a restart

	bin, dir string
	mu       sync.Mutex
	cmd      *exec.Cmd
	exited   chan error
	out      *bytes.Buffer
	httpPort int
	tcpPort  int
}

// Dedicated starts a clickhouse-server for t alone, stopped and removed at
// t's cleanup. It skips t when Debian's clickhouse-server is not installed:
// a server named by TOLLGATE_CLICKHOUSE_HTTP is shared and not the test's
// to stop.
func Dedicated(t testing.TB) *Proc {
	t.Helper()
	bin := findServer()
	if bin == "" {
		t.Skip("no clickhouse-server binary to start and stop (the test stops the server mid-run): install Debian's clickhouse-server (scripts/test.sh does)")
	}
	dir, err := os.MkdirTemp("", "tollgate-clickhouse-dedicated-")
	if err != nil {
		t.Fatal(err)
	}
	p, err := newProc(bin, dir)
	if err != nil {
		os.RemoveAll(dir)
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Stop(); err != nil {
			t.Errorf("stop clickhouse-server: %v", err)
		}
		os.RemoveAll(dir)
	})
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	return p
}

// newProc is a server of bin (not started) in dir, on free loopback
// ports, its config written.
func newProc(bin, dir string) (*Proc, error) {
	p := &Proc{bin: bin, dir: dir}
	var err error
	if p.httpPort, err = FreePort(); err == nil {
		p.tcpPort, err = FreePort()
	}
	if err != nil {
		return nil, err
	}
	p.URL = fmt.Sprintf("http://127.0.0.1:%d", p.httpPort)
	cfg := strings.NewReplacer("{{dir}}", dir, "{{http}}", fmt.Sprint(p.httpPort), "{{tcp}}", fmt.Sprint(p.tcpPort)).Replace(configXML)
	for name, text := range map[string]string{"config.xml": cfg, "users.xml": usersXML} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// Start runs the server (again) and waits until it answers SELECT 1.
func (p *Proc) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return fmt.Errorf("clickhouse-server is already running")
	}
	p.out = &bytes.Buffer{}
	cmd := exec.Command(p.bin, "--config-file="+filepath.Join(p.dir, "config.xml"))
	cmd.Dir = p.dir
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", p.bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	if err := waitReady(p.URL, exited); err != nil {
		_ = cmd.Process.Kill()
		<-exited
		logTail, _ := os.ReadFile(filepath.Join(p.dir, "server.err.log"))
		if len(logTail) > 2000 {
			logTail = logTail[len(logTail)-2000:]
		}
		return fmt.Errorf("clickhouse-server did not come up: %w\noutput: %s\nerror log: %s", err, p.out, logTail)
	}
	p.cmd, p.exited = cmd, exited
	return nil
}

// Stop ends the server (SIGTERM, SIGKILL after 30s) and waits until it
// has exited, so its port refuses connections when Stop returns. Stopping
// a stopped server does nothing.
func (p *Proc) Stop() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return nil
	}
	cmd, exited := p.cmd, p.exited
	p.cmd, p.exited = nil, nil
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
		return fmt.Errorf("server ignored SIGTERM for 30s; killed")
	}
}
