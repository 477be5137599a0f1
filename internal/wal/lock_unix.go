//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package wal

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lockDir takes an exclusive flock on dir/LOCK: two processes appending to
// one log would interleave sequence numbers and corrupt it. The kernel
// drops the lock when the process dies, SIGKILL included, so a crash never
// leaves a stale lock behind.
func lockDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, "LOCK")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("open wal lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("wal directory %s is in use (lock %s): %w", dir, path, err)
	}
	return f, nil
}
