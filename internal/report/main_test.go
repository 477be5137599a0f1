package report

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine behind: the
// reports' tests open SQLite stores.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
