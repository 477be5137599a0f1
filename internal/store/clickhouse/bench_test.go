package clickhouse

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/store/sqlite/bench"
	"github.com/tollgate-dev/tollgate/internal/wal"
)

// BenchmarkIngest is one replica's sustained ledger rate into ClickHouse
// (issue 9: ≥ 50,000 records/s on the project's machine), one op = one
// Record. Run it with a fixed count, as each op needs a Record made
// beforehand:
//
//	go test ./internal/store/clickhouse -run XXX -bench BenchmarkIngest -benchtime 200000x
//
// Sub-benchmarks, each at batch=1000 (serve's config.ClickHouseBatchSize)
// and batch=10000 (store.batch_size raised, for a busy replica):
//
//   - insert: Store.Insert of whole batches one after another: the
//     store's own rate.
//   - wal: serve's whole path. 64 goroutines (requests finishing at once)
//     each encode a Record (Record.MarshalJSON), append it to a real
//     write-ahead queue with fsync and wait for its group commit; the
//     queue's shipper hands batches of up to 1000 (1 s) to Store.Insert,
//     taking the Records kept in memory as serve does (cmd/tollgate
//     ledger.go, heldRecords), in batches of up to the batch size or what
//     1 s brought. The clock stops when the last Record is in ClickHouse.
//   - wal-replay: the same, but the shipper decodes the queue's JSON, as
//     after a restart (or while more than 16 MiB waits unshipped).
//
// Reported: records/s; cpu-µs/record of this process (encoding, queue,
// shipping, HTTP: what a replica spends, all goroutines); when the
// server's process can be found on this machine, ch-cpu-µs/record, what
// ClickHouse spent on the same inserts (its merges meanwhile included);
// and disk-bytes/record, the requests table's parts on disk per row. The Records come from the 10 M
// benchmark's generator (realistic traffic, a third of them with a token
// timeline), one day of them, so a batch falls in one day partition as
// live traffic does.
func BenchmarkIngest(b *testing.B) {
	for _, size := range []int{config.ClickHouseBatchSize, 10 * config.ClickHouseBatchSize} {
		b.Run(fmt.Sprintf("insert/batch=%d", size), func(b *testing.B) { benchInsert(b, size) })
		b.Run(fmt.Sprintf("wal/batch=%d", size), func(b *testing.B) { benchWAL(b, size, false) })
		b.Run(fmt.Sprintf("wal-replay/batch=%d", size), func(b *testing.B) { benchWAL(b, size, true) })
	}
}

func benchInsert(b *testing.B, size int) {
	s := openTest(b)
	recs := benchRecords(b, b.N)
	ctx := context.Background()
	m := startCPU(b)
	b.ReportAllocs()
	b.ResetTimer()
	for batch := range slices.Chunk(recs, size) {
		if err := s.Insert(ctx, batch); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	m.report(b)
	checkRows(b, s, b.N)
}

// producers is how many requests finish at once in the wal benchmarks.
const producers = 64

func benchWAL(b *testing.B, size int, replay bool) {
	s := openTest(b)
	recs := benchRecords(b, b.N)
	q, err := wal.Open(wal.Options{Dir: filepath.Join(b.TempDir(), "queue")}, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer q.Close()
	runCtx, stopRun := context.WithCancel(context.Background())
	defer stopRun()
	runDone := make(chan error, 1)

	var held sync.Map // seq → *record.Record, as serve's heldRecords
	var shipped atomic.Int64
	sink := func(ctx context.Context, payloads [][]byte) error {
		batch := make([]*record.Record, 0, len(payloads))
		first, seqs := wal.BatchFirst(ctx)
		for i, p := range payloads {
			if !replay && seqs {
				if r, ok := held.Load(first + uint64(i)); ok {
					batch = append(batch, r.(*record.Record))
					continue
				}
			}
			r := &record.Record{}
			if err := json.Unmarshal(p, r); err != nil {
				return fmt.Errorf("decode queued record: %w", err)
			}
			batch = append(batch, r)
		}
		if err := s.Insert(ctx, batch); err != nil {
			return err
		}
		if seqs && !replay {
			for i := range payloads {
				held.Delete(first + uint64(i))
			}
		}
		shipped.Add(int64(len(batch)))
		return nil
	}

	m := startCPU(b)
	b.ReportAllocs()
	b.ResetTimer()
	go func() { runDone <- q.Run(runCtx) }()
	shipDone := make(chan error, 1)
	go func() {
		shipDone <- q.Ship(context.Background(), size, config.ClickHouseFlushInterval, sink)
	}()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, producers)
	for range producers {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(len(recs)) {
					return
				}
				r := recs[i]
				p, err := r.MarshalJSON()
				if err != nil {
					errs <- err
					return
				}
				c, err := q.Append(p)
				if err != nil {
					errs <- err
					return
				}
				if !replay {
					held.Store(c.Seq(), r)
				}
				if err := c.Wait(context.Background()); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
	// As serve's shutdown: stop the committer; the shipper then delivers
	// what is left at once, without waiting for the 1 s flush, and returns.
	stopRun()
	if err := <-runDone; err != nil {
		b.Fatal(err)
	}
	if err := <-shipDone; err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	m.report(b)
	if got := shipped.Load(); got != int64(b.N) {
		b.Fatalf("shipped %d records; want %d", got, b.N)
	}
	checkRows(b, s, b.N)
}

// benchRecords returns n generated Records with distinct request ids.
func benchRecords(b *testing.B, n int) []*record.Record {
	b.Helper()
	g := bench.New(bench.Config{Rows: n + n/10 + 1000, Days: 1, Users: 1000})
	buf := make([]record.Record, n)
	got := g.Next(buf)
	if got < n {
		b.Fatalf("the generator made %d records; want %d", got, n)
	}
	out := make([]*record.Record, n)
	for i := range buf {
		out[i] = &buf[i]
	}
	return out
}

// checkRows fails b unless the table holds want rows: a benchmark that
// lost rows would report a rate it did not reach.
func checkRows(b *testing.B, s *Store, want int) {
	b.Helper()
	out, err := s.c.text(context.Background(), "", "SELECT count() FROM "+quoteIdent(s.db)+".requests")
	if err != nil {
		b.Fatal(err)
	}
	if out != strconv.Itoa(want) {
		b.Fatalf("requests holds %s rows; want %d", out, want)
	}
	// The ledger's size on disk (compressed, marks included) per row, for
	// sizing ClickHouse's disk; the parts may not all be merged yet.
	out, err = s.c.text(context.Background(), "", "SELECT sum(bytes_on_disk) / sum(rows) FROM system.parts WHERE active AND database = "+
		quoteString(s.db)+" AND table = 'requests'")
	if err != nil {
		b.Fatal(err)
	}
	if v, err := strconv.ParseFloat(out, 64); err == nil {
		b.ReportMetric(v, "disk-bytes/record")
	}
}

// cpuMeter measures this process's CPU time and, when found, the
// ClickHouse server's, over a benchmark.
type cpuMeter struct {
	self, server time.Duration
	serverPID    int
	at           time.Time
}

func startCPU(b *testing.B) *cpuMeter {
	m := &cpuMeter{self: selfCPU(), serverPID: serverPID(serverURL), at: time.Now()}
	if m.serverPID != 0 {
		m.server, _ = procCPU(m.serverPID)
	}
	return m
}

// report adds records/s and the CPU per record to b.
func (m *cpuMeter) report(b *testing.B) {
	n := float64(b.N)
	b.ReportMetric(n/time.Since(m.at).Seconds(), "records/s")
	b.ReportMetric(float64((selfCPU()-m.self).Microseconds())/n, "cpu-µs/record")
	if m.serverPID != 0 {
		if now, err := procCPU(m.serverPID); err == nil {
			b.ReportMetric(float64((now-m.server).Microseconds())/n, "ch-cpu-µs/record")
		}
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
// that http_port (chtest's, or a system server's). 0 if none is found.
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
