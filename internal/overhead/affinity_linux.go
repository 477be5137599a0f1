package overhead

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// affinitySupported says whether processes can be pinned to CPUs here.
const affinitySupported = true

// pinTasks sets the affinity of every thread of pid to cpu. Threads made
// later inherit it from the thread that makes them, so passes repeat
// until one finds no thread left to pin.
func pinTasks(pid, cpu int) error {
	var set unix.CPUSet
	set.Set(cpu)
	return setTasks(pid, &set)
}

func setTasks(pid int, set *unix.CPUSet) error {
	done := map[int]bool{}
	for range 20 {
		ents, err := os.ReadDir(filepath.Join("/proc", strconv.Itoa(pid), "task"))
		if err != nil {
			return err
		}
		fresh := 0
		for _, e := range ents {
			tid, err := strconv.Atoi(e.Name())
			if err != nil || done[tid] {
				continue
			}
			if err := unix.SchedSetaffinity(tid, set); err != nil && !errors.Is(err, unix.ESRCH) {
				return err
			}
			done[tid] = true
			fresh++
		}
		if fresh == 0 {
			return nil
		}
	}
	return nil
}

// pinSelf pins this process's threads to cpu and returns a function that
// gives them back the affinity they had.
func pinSelf(cpu int) (restore func(), err error) {
	var old unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		return nil, err
	}
	if err := pinTasks(os.Getpid(), cpu); err != nil {
		return nil, err
	}
	return func() { _ = setTasks(os.Getpid(), &old) }, nil
}
