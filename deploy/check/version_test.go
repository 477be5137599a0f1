package check

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestVersion: `tollgate version` and `--version` print the build
// information of a real build: in a clone (a .git directory) the VCS
// revision is the checkout's HEAD. Go does not stamp VCS information in a
// git worktree (.git is a file there), so there the revision is only
// required to be reported as unknown.
func TestVersion(t *testing.T) {
	out, err := exec.Command(tollgateBin, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	out2, err := exec.Command(tollgateBin, "--version").Output()
	if err != nil || string(out2) != string(out) {
		t.Errorf("--version %q (%v); want the same as version %q", out2, err, out)
	}
	fields := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n")[1:] {
		k, v, _ := strings.Cut(strings.TrimSpace(l), ":")
		fields[k] = strings.TrimSpace(v)
	}
	for _, k := range []string{"version", "revision", "time", "modified", "go"} {
		if _, ok := fields[k]; !ok {
			t.Errorf("version output has no %q line:\n%s", k, out)
		}
	}
	if !strings.HasPrefix(string(out), "tollgate ") || !strings.HasPrefix(fields["go"], "go1.") {
		t.Errorf("version output:\n%s", out)
	}
	st, err := os.Stat(filepath.Join(repoRoot, ".git"))
	if err != nil || !st.IsDir() {
		t.Logf("no .git directory (a worktree or an export): VCS stamping not checked\n%s", out)
		return
	}
	head, err := exec.Command("git", "-C", repoRoot, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("git rev-parse HEAD: %v", err)
	}
	if want := strings.TrimSpace(string(head)); fields["revision"] != want {
		t.Errorf("revision %q; want HEAD %s\n%s", fields["revision"], want, out)
	}
	if fields["time"] == "" || strings.HasPrefix(fields["time"], "unknown") {
		t.Errorf("no VCS time:\n%s", out)
	}
}
