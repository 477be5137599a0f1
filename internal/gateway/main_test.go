package gateway

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine behind: the
// gateway starts them per request (the SSE tap, the upstream transport's
// connection loops, token checks) and each must end with its request or
// with Close.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
