package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
)

// benchWorkDir is the work directory of a bench harness: dir (--dir),
// made if missing, or else a new temporary one named prefix…; done
// removes a temporary one and leaves a given one.
func benchWorkDir(dir, prefix string) (path string, done func(), err error) {
	if dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", nil, fmt.Errorf("--dir: %w", err)
		}
		return dir, func() {}, nil
	}
	if dir, err = os.MkdirTemp("", prefix); err != nil {
		return "", nil, err
	}
	return dir, func() { os.RemoveAll(dir) }, nil
}

// writeBenchReport prints a bench report as indented JSON (--json) or as
// its text.
func writeBenchReport(w io.Writer, asJSON bool, rep interface{ WriteText(io.Writer) }) error {
	if !asJSON {
		rep.WriteText(w)
		return nil
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}
