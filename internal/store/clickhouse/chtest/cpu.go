package chtest

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// CPU measures, for a benchmark, the CPU time of this process and of the
// ClickHouse server behind base when it runs on this machine: what a
// replica spends and what the server spends on the same work (its merges
// meanwhile included).
type CPU struct {
	self, server time.Duration
	serverPID    int
}

// StartCPU starts measuring.
func StartCPU(base string) *CPU {
	m := &CPU{self: selfCPU(), serverPID: serverPID(base)}
	if m.serverPID != 0 {
		m.server, _ = procCPU(m.serverPID)
	}
	return m
}

// Since returns the CPU time spent since StartCPU by this process and by
// the server; server is -1 when the server's process was not found.
func (m *CPU) Since() (self, server time.Duration) {
	self, server = selfCPU()-m.self, -1
	if m.serverPID != 0 {
		if now, err := procCPU(m.serverPID); err == nil {
			server = now - m.server
		}
	}
	return self, server
}

// Report adds to b, for b.N records handled since at: records/s, this
// process's CPU per record (cpu-µs/record) and, when found, the server's
// (ch-cpu-µs/record).
func (m *CPU) Report(b *testing.B, at time.Time) {
	n := float64(b.N)
	b.ReportMetric(n/time.Since(at).Seconds(), "records/s")
	self, server := m.Since()
	b.ReportMetric(float64(self.Microseconds())/n, "cpu-µs/record")
	if server >= 0 {
		b.ReportMetric(float64(server.Microseconds())/n, "ch-cpu-µs/record")
	}
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procCPU is a process's utime + stime from /proc (Linux; USER_HZ 100).
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command's closing parenthesis: state is field 3,
	// utime 14 and stime 15.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: utime %q stime %q", pid, f[11], f[12])
	}
	return time.Duration(ut+st) * 10 * time.Millisecond, nil
}

// serverPID finds the clickhouse-server process serving base's HTTP port
// on this machine: one started with --config-file naming a file that sets
// that http_port (Start's, or a system server's). 0 if none is found.
func serverPID(base string) int {
	if runtime.GOOS != "linux" || base == "" {
		return 0
	}
	i := strings.LastIndexByte(base, ':')
	if i < 0 {
		return 0
	}
	port := strings.TrimRight(base[i+1:], "/")
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || !strings.Contains(string(cmd), "clickhouse") {
			continue
		}
		for arg := range strings.SplitSeq(string(cmd), "\x00") {
			cfg, ok := strings.CutPrefix(arg, "--config-file=")
			if !ok {
				continue
			}
			if !filepath.IsAbs(cfg) {
				if cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid)); err == nil {
					cfg = filepath.Join(cwd, cfg)
				}
			}
			if x, err := os.ReadFile(cfg); err == nil && strings.Contains(string(x), "<http_port>"+port+"</http_port>") {
				return pid
			}
		}
	}
	return 0
}
