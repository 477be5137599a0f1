package overhead

import (
	"bytes"
	"context"
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
)

// proc is one arm (or the mock) running as a child process.
type proc struct {
	name    string
	cmd     *exec.Cmd
	addr    string
	logPath string
	done    chan struct{}
	waitErr error
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

// startProc runs exe args with env added, its output in logPath, waits
// until http://addr/healthz answers, and pins it to cpu (−1: not pinned).
func startProc(ctx context.Context, name, exe string, args, env []string, addr, logPath string, cpu int) (*proc, error) {
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	p := &proc{name: name, addr: addr, logPath: logPath, done: make(chan struct{})}
	p.cmd = exec.Command(exe, args...)
	p.cmd.Env = append(os.Environ(), env...)
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
	if err := p.waitReady(ctx, 2*time.Minute); err != nil {
		p.kill()
		return nil, err
	}
	if cpu >= 0 {
		if err := pinTasks(p.cmd.Process.Pid, cpu); err != nil {
			p.kill()
			return nil, fmt.Errorf("pin %s to CPU %d: %w", name, cpu, err)
		}
	}
	return p, nil
}

// waitReady polls /healthz until it answers 200, the process exits or
// the deadline passes.
func (p *proc) waitReady(ctx context.Context, within time.Duration) error {
	c := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(within)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		resp, err := c.Get("http://" + p.addr + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready at %s within %s; its log:\n%s", p.name, p.addr, within, p.logTail())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-p.done:
			return fmt.Errorf("%s exited before it was ready (%v); its log:\n%s", p.name, p.waitErr, p.logTail())
		case <-tick.C:
		}
	}
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// stop sends SIGTERM and waits for the exit (tollgate serve flushes its
// ledger on the way out); past within it kills.
func (p *proc) stop(within time.Duration) error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(within):
		p.kill()
		return fmt.Errorf("%s did not stop within %s after SIGTERM; killed", p.name, within)
	}
	var ee *exec.ExitError
	if p.waitErr != nil && !errors.As(p.waitErr, &ee) {
		return p.waitErr
	}
	if ee != nil && ee.ExitCode() != 0 {
		return fmt.Errorf("%s exited with %v; its log:\n%s", p.name, p.waitErr, p.logTail())
	}
	return nil
}

func (p *proc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

func (p *proc) logTail() string {
	b, _ := os.ReadFile(p.logPath)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// clockTick is USER_HZ: the unit of utime and stime in /proc/PID/stat,
// 100 on every Linux architecture Go supports.
const clockTick = 10 * time.Millisecond

// cpuTime is the process's user+system CPU time so far, all threads.
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name may hold spaces; the fields after it do not.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	// Fields 14 and 15 of stat(5); f[0] is field 3.
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return time.Duration(ut+st) * clockTick, nil
}

// cpuBusy is the time CPU cpu has spent busy (user, nice, system, irq,
// softirq, steal) since boot, from /proc/stat.
func cpuBusy(cpu int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	name := "cpu" + strconv.Itoa(cpu)
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 9 || f[0] != name {
			continue
		}
		var ticks int64
		for _, i := range []int{1, 2, 3, 6, 7, 8} { // user nice system (idle iowait) irq softirq steal
			v, err := strconv.ParseInt(f[i], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/stat %s: %w", name, err)
			}
			ticks += v
		}
		return time.Duration(ticks) * clockTick, nil
	}
	return 0, fmt.Errorf("/proc/stat: no %s line", name)
}

// memory is the resident set and its peak so far, in KiB.
func memory(pid int) (rss, hwm int64, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch k {
		case "VmRSS":
			rss, _ = strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		case "VmHWM":
			hwm, _ = strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	return rss, hwm, nil
}
