package bench

import (
	"errors"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

const evictNote = "file evicted from the OS page cache (posix_fadvise DONTNEED) + new sqlite.Open"

// evict drops the ledger's pages from the OS page cache, so that a cold
// query reads the disk as after a reboot, without touching any other file
// (dropping the whole page cache would need root and slow everyone else).
func evict(path string) error {
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		f, err := os.Open(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		err = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
		f.Close()
		if err != nil {
			return err
		}
	}
	return nil
}
