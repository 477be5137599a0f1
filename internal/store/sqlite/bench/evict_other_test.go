//go:build !linux

package bench

const evictNote = "new sqlite.Open only (this platform cannot evict one file from the OS page cache)"

func evict(string) error { return nil }
