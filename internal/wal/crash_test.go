package wal

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
)

const (
	crashDirEnv   = "TOLLGATE_WAL_CRASH_DIR"
	crashRoundEnv = "TOLLGATE_WAL_CRASH_ROUND"
)

type crashKey struct{ R, G, N int }

// crashChild is the process TestCrashSIGKILL kills: it appends from several
// goroutines with real fsync and prints "seq round goroutine n" for every
// entry whose Wait returned, until it is killed.
func crashChild(dir, round string) {
	w, err := Open(Options{Dir: dir, SegmentBytes: 32 << 10}, nil, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		os.Exit(2)
	}
	go w.Run(context.Background())
	var mu sync.Mutex
	for g := range 8 {
		go func() {
			for n := 0; ; n++ {
				c, err := w.Append(fmt.Appendf(nil, `{"R":%s,"G":%d,"N":%d}`, round, g, n))
				if err == nil {
					err = c.Wait(context.Background())
				}
				if err != nil {
					fmt.Fprintln(os.Stderr, "append:", err)
					os.Exit(3)
				}
				mu.Lock()
				// Unbuffered: a printed line is a Wait that returned.
				fmt.Fprintf(os.Stdout, "%d %s %d %d\n", c.Seq(), round, g, n)
				mu.Unlock()
			}
		}()
	}
	select {}
}

func TestCrashSIGKILL(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("needs SIGKILL")
	}
	dir := t.TempDir()
	acked := map[uint64]crashKey{} // every entry a killed child saw durable
	for round := range 3 {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), crashDirEnv+"="+dir, crashRoundEnv+"="+strconv.Itoa(round))
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(out)
		lines := 0
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				// A line the kill cut short is not a confirmation.
				if !errors.Is(err, io.EOF) {
					t.Fatal(err)
				}
				break
			}
			var seq uint64
			var k crashKey
			if _, err := fmt.Sscanf(line, "%d %d %d %d", &seq, &k.R, &k.G, &k.N); err != nil {
				t.Fatalf("child printed %q: %v", line, err)
			}
			acked[seq] = k
			if lines++; lines == 2000 {
				// SIGKILL mid-run: appends, writes and fsyncs in flight.
				if err := cmd.Process.Kill(); err != nil {
					t.Fatal(err)
				}
			}
		}
		err = cmd.Wait()
		if lines < 2000 {
			t.Fatalf("round %d: child ended after %d lines: %v\n%s", round, lines, err, stderr.String())
		}

		seqs, payloads := dump(t, dir)
		t.Logf("round %d: %d entries confirmed in total, %d on disk", round, len(acked), len(seqs))
		onDisk := make(map[uint64]crashKey, len(seqs))
		seen := make(map[crashKey]bool, len(seqs))
		next := map[[2]int]int{} // per (round, goroutine): the n expected next
		for i, p := range payloads {
			var k crashKey
			if err := json.Unmarshal([]byte(p), &k); err != nil {
				t.Fatalf("entry %d is not what was appended: %q", seqs[i], p)
			}
			if seen[k] {
				t.Fatalf("entry %+v is in the log twice", k)
			}
			seen[k] = true
			onDisk[seqs[i]] = k
			// A goroutine appends n+1 only once n is durable, so its
			// entries are 0..m without holes.
			if g := [2]int{k.R, k.G}; k.N != next[g] {
				t.Fatalf("round %d goroutine %d: entry %d follows %d", k.R, k.G, k.N, next[g]-1)
			}
			next[[2]int{k.R, k.G}]++
		}
		for seq, k := range acked {
			if got, ok := onDisk[seq]; !ok || got != k {
				t.Fatalf("entry %d %+v was confirmed by Wait but after SIGKILL it is %+v (present %v)", seq, k, got, ok)
			}
		}
	}
}
