package web

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine behind: the JSON
// API's tests open SQLite stores (with their writer) and quota limiters.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
