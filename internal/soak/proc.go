package soak

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	_ "modernc.org/sqlite" // the ledger's driver, to count its rows
)

// proc is a child process: the simulator or the gateway.
type proc struct {
	name, logPath string
	cmd           *exec.Cmd
	done          chan struct{}
	waitErr       error
}

// freeAddr picks a loopback port that is free now.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// startProc runs exe args, its output in logPath, and waits until
// http://addr+health answers 200.
func startProc(ctx context.Context, name, exe string, args []string, addr, health, logPath string) (*proc, error) {
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	p := &proc{name: name, logPath: logPath, done: make(chan struct{})}
	p.cmd = exec.Command(exe, args...)
	p.cmd.Stdout, p.cmd.Stderr = lf, lf
	if err := p.cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() {
		p.waitErr = p.cmd.Wait()
		lf.Close()
		close(p.done)
	}()
	c := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := c.Get("http://" + addr + health)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p, nil
			}
		}
		if time.Now().After(deadline) {
			p.kill()
			return nil, fmt.Errorf("%s not ready at %s within a minute; its log is %s", name, addr, logPath)
		}
		select {
		case <-ctx.Done():
			p.kill()
			return nil, ctx.Err()
		case <-p.done:
			return nil, fmt.Errorf("%s exited before it was ready (%v); its log is %s", name, p.waitErr, logPath)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// stop sends SIGTERM and waits for the exit (serve flushes its ledger on
// the way out); past within it kills.
func (p *proc) stop(within time.Duration) error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(within):
		p.kill()
		return fmt.Errorf("%s did not stop within %s after SIGTERM; killed", p.name, within)
	}
	var ee *exec.ExitError
	if errors.As(p.waitErr, &ee) && ee.ExitCode() != 0 {
		return fmt.Errorf("%s exited with %v; its log is %s", p.name, p.waitErr, p.logPath)
	}
	return nil
}

// kill ends the process if it still runs; safe to call more than once.
func (p *proc) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// rss is the process's resident set in KiB (VmRSS).
func rss(pid int) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no VmRSS line", pid)
}

// scrapeGauges reads the unlabelled samples named from a Prometheus text
// exposition, in the order asked; a missing one is an error.
func scrapeGauges(ctx context.Context, c *http.Client, url string, names ...string) ([]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return parseGauges(bufio.NewScanner(resp.Body), names)
}

func parseGauges(sc *bufio.Scanner, names []string) ([]float64, error) {
	out := make([]float64, len(names))
	found := make([]bool, len(names))
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		for i, n := range names {
			if name == n {
				v, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
				if err != nil {
					return nil, fmt.Errorf("metric %s: %q is not a number", n, val)
				}
				out[i], found[i] = v, true
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	for i, n := range names {
		if !found[i] {
			return nil, fmt.Errorf("metric %s not exposed", n)
		}
	}
	return out, nil
}

// ledgerRows counts the rows of the SQLite ledger at path.
func ledgerRows(ctx context.Context, path string) (int64, error) {
	db, err := sql.Open("sqlite", path+"?_query_only=1")
	if err != nil {
		return 0, err
	}
	defer db.Close()
	var n int64
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM requests").Scan(&n); err != nil {
		return 0, fmt.Errorf("count the ledger's rows in %s: %w", path, err)
	}
	return n, nil
}

// loadavg is the first three fields of /proc/loadavg, "" when unreadable.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}
