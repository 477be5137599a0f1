package main

import (
	"context"
	"errors"
	"io"
)

// runBenchOverhead is `tollgate bench overhead`: the gateway's own
// overhead harness (issue 8, point 3).
func runBenchOverhead(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return errors.New("bench overhead: not built yet")
}
