package main

import (
	"context"
	"errors"
	"io"
)

// runBench is `tollgate bench`: a load generator for any OpenAI-compatible
// endpoint (issue 8, point 1).
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return errors.New("bench: not built yet")
}
