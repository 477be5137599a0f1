package bench

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine behind: the
// generator runs shards on worker goroutines and opens SQLite stores.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
