package overhead

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/internal/childproc"
)

// proc is one arm (or the mock) running as a child process.
type proc = childproc.Proc

// startProc runs exe args with env added, its output in logPath, waits
// until http://addr/healthz answers, and pins it to cpu (−1: not pinned).
func startProc(ctx context.Context, name, exe string, args, env []string, addr, logPath string, cpu int) (*proc, error) {
	p, err := childproc.Start(ctx, childproc.Spec{Name: name, Exe: exe, Args: args, Env: env, Addr: addr, LogPath: logPath, Within: 2 * time.Minute})
	if err != nil {
		return nil, err
	}
	if cpu >= 0 {
		if err := pinTasks(p.Pid(), cpu); err != nil {
			p.Kill()
			return nil, fmt.Errorf("pin %s to CPU %d: %w", name, cpu, err)
		}
	}
	return p, nil
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
