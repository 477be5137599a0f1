// Package check tests tollgate's deployment artefacts with the tools of
// their ecosystems: the Helm chart with Helm's own Go module and the
// Kubernetes API types, the systemd unit with systemd-analyze, the Grafana
// dashboard's PromQL with Prometheus' own parser against a real scrape.
// It is a module of its own (deploy/check/go.mod) so that Helm, the
// Kubernetes types and Prometheus stay out of tollgate's dependencies;
// scripts/test.sh runs it with `cd deploy/check && GOWORK=off go test ./...`.
package check

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// repoRoot is tollgate's checkout, two levels up.
const repoRoot = "../.."

// tollgateBin is the tollgate binary built once for the tests that run it.
var tollgateBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tollgate-check-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	tollgateBin = filepath.Join(dir, "tollgate")
	// The same static build as the Containerfile's; -buildvcs=auto (over a
	// GOFLAGS=-buildvcs=false) records the revision when there is one.
	cmd := exec.Command("go", "build", "-buildvcs=auto", "-trimpath", "-o", tollgateBin, "./cmd/tollgate")
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build tollgate: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
